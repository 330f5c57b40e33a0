"""`memscale` command line. Admin commands print only what they name, on one line (the REST contract)."""

from __future__ import annotations

import sys

import click

from app.config import Settings
from app.kit.cli import admin_session as _admin_session
from app.kit.cli import app_sessions as _app_sessions
from app.kit.cli import run_or_fail as _run
from app.kit.items import RETAINED_TYPES


class _LazyGroup(click.Group):
    """`memscale inference ...` loads the torch tier only when asked (the API never imports it);
    `memscale bench ...` loads the benchmarks only when asked; `memscale branch ...` and
    `memscale jobs ...` live with their domains (app/branches/cli.py, app/jobs/cli.py)."""

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | {"inference", "bench", "branch", "jobs"})

    def get_command(self, ctx, name):
        if name == "inference":
            from app.inference.cli import inference

            return inference
        if name == "bench":
            from app.bench_cli import bench

            return bench
        if name == "branch":
            from app.branches.cli import branch

            return branch
        if name == "jobs":
            from app.jobs.cli import jobs

            return jobs
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup)
def main() -> None:
    """memscale: the memory service for AI agents."""


@main.group()
def admin() -> None:
    """Orgs, users and keys."""


@admin.command("create-org")
@click.argument("name")
def create_org(name: str) -> None:
    from app.orgs import service

    with _admin_session(Settings()) as db:
        org = _run(lambda: service.create_org(db, name))
        db.commit()
        click.echo(str(org.id))


@admin.command("create-user")
@click.option("--org", "org_name", required=True)
@click.argument("user")
@click.option("--role", "roles", multiple=True, type=click.Choice(("member", "steward", "auditor", "admin")))
@click.option("--group", "groups", multiple=True)
@click.option("--clearance", "clearances", multiple=True)
def create_user(org_name: str, user: str, roles, groups, clearances) -> None:
    from app.orgs import service

    with _admin_session(Settings()) as db:
        org = _run(lambda: service.org_by_name(db, org_name))
        u = _run(lambda: service.create_user(db, org, user, roles=roles, groups=groups, clearances=clearances))
        db.commit()
        click.echo(str(u.id))


@admin.command("create-key")
@click.option("--org", "org_name", required=True)
@click.option("--user", "user", required=True)
def create_key(org_name: str, user: str) -> None:
    from app.orgs import service

    with _admin_session(Settings()) as db:
        org = _run(lambda: service.org_by_name(db, org_name))
        u = _run(lambda: service.user_by_name(db, org, user))
        key = service.create_key(db, u)
        db.commit()
        click.echo(key)


@admin.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--org", "org_name", required=True)
@click.option("--user", "user", required=True, help="the items' owner, whose right to each scope is checked")
def import_episodes(path: str, org_name: str, user: str) -> None:
    """Episodes (one API body a line) and knowledge assets (`"type": "asset"` lines) from a JSONL
    file, all or nothing; prints how many."""
    from app.episodes import bulk

    with open(path, encoding="utf-8") as f:
        items = _run(lambda: bulk.parse_lines(f))  # a bad line refuses the file before the model loads
    _check_embedder(settings := Settings())
    with _admin_session(settings) as db:
        principal = _run(lambda: bulk.principal_of(db, org_name, user))
    click.echo(str(len(_run(lambda: bulk.run(_app_sessions(settings), settings, principal, items)))))


def _check_embedder(settings: Settings) -> None:
    """Commands that write refuse to start over an org whose vectors another model made."""
    from app.embedders.service import check_start

    with _admin_session(settings) as db:
        _run(lambda: check_start(db, settings.embedding_model))


@admin.command("reembed")
@click.option("--org", "org_name", required=True)
@click.option("--model", "model", required=True, help="the embedding model id the org's vectors move to")
@click.option("--nice", "niceness", default=10, show_default=True, help="CPU priority this background run gives up to serving")
@click.option("--threads", type=int, default=None, help="threads the new model may use (default: every core)")
def reembed(org_name: str, model: str, niceness: int, threads: int | None) -> None:
    """Re-embed an org's vectors with MODEL while it is served (resumable: run it again after a
    stop); search switches to the new vectors at the end, in one transaction. Prints the job's JSON."""
    import os

    if niceness:
        os.nice(niceness)
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)  # read by the model's engine when it loads
    from app.jobs.cli import run_in_foreground

    run_in_foreground(org_name, "reembed", {"model": model})


@main.command()
@click.option("--kind", "kinds", multiple=True, help="only these job kinds (default: all)")
@click.option("--lease", default=60, show_default=True, help="seconds a claimed job stays ours without progress")
@click.option("--no-schedule", is_flag=True, help="do not enqueue periodic jobs from this worker")
@click.option("--org", "org_names", multiple=True, help="only this org's jobs (name; repeatable; default: every org)")
def worker(kinds, lease: int, no_schedule: bool, org_names) -> None:
    """Run queued jobs (and enqueue periodic ones) until stopped."""
    from app.jobs.runner import worker_loop
    from app.kit.database.pg import admin_url, install_sigterm_handler
    from app.kit.http.telemetry import setup_logging

    settings = Settings()
    install_sigterm_handler()
    setup_logging(settings.log_level)
    admin_url(settings)  # hold the embedded server while we run
    _check_embedder(settings)
    orgs = None
    if org_names:
        from app.orgs import service as org_service

        with _admin_session(settings) as db:
            orgs = [_run(lambda n=n: org_service.org_by_name(db, n)).id for n in org_names]
    worker_loop(settings, _app_sessions(settings), kinds=list(kinds) or None, orgs=orgs, lease_s=lease, schedule=not no_schedule)


@main.command("mcp")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8200, show_default=True)
def mcp_cmd(transport: str, host: str, port: int) -> None:
    """MCP server over the REST API (stdio: MEMSCALE_API_KEY; http: each request's Bearer key)."""
    from app.mcp_server import run

    run(transport=transport, host=host, port=port)


@main.group()
def export() -> None:
    """Export data for training and analysis."""


@export.command("trajectories")
@click.option("--org", "org_name", required=True)
@click.option("--out", "out", type=click.File("w"), default="-", help="JSONL file (default: stdout)")
def export_trajectories(org_name: str, out) -> None:
    """One JSON line per session: its memory-tool calls (ids, not memory text) and the outcome/reward."""
    import json

    from app.sessions.export import trajectories

    settings = Settings()
    with _admin_session(settings) as db:
        from app.orgs import service as orgs

        org = _run(lambda: orgs.org_by_name(db, org_name))
        n = 0
        for line in trajectories(db, org.id):
            out.write(json.dumps(line, default=str) + "\n")
            n += 1
    click.echo(f"{n} trajectories", err=True)


@main.group()
def audit() -> None:
    """Compliance tools."""


@audit.command("verify")
@click.option("--org", "org_name", required=True)
@click.option(
    "--checkpoint",
    "checkpoint_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="a JSON checkpoint from `memscale audit checkpoint`: the chain must still pass through it",
)
def audit_verify(org_name: str, checkpoint_file: str | None) -> None:
    """Recompute the org's audit hash chain and seals; name the first broken link (exit 1) or print ok."""
    import json
    from pathlib import Path

    from app.audit.service import checkpoint_mismatch, verify_chain
    from app.orgs import service as orgs

    settings = Settings()
    key = settings.audit_secret()
    with _admin_session(settings) as db:
        org = _run(lambda: orgs.org_by_name(db, org_name))
        n, broken = verify_chain(db, org.id, key=key)
        if broken is None and checkpoint_file:
            mismatch = checkpoint_mismatch(db, org.id, json.loads(Path(checkpoint_file).read_text()), key)
            if mismatch:
                click.echo(mismatch)
                sys.exit(1)
    if broken is not None:
        click.echo(f"broken at seq {broken.seq} (event {broken.id}, action {broken.action}, at {broken.at.isoformat()})")
        sys.exit(1)
    click.echo(f"ok {n} events")


@audit.command("checkpoint")
@click.option("--org", "org_name", required=True)
def audit_checkpoint(org_name: str) -> None:
    """Print the chain's head, signed, as one JSON line: store it where the service cannot write."""
    import json

    from app.audit.service import checkpoint
    from app.orgs import service as orgs

    settings = Settings()
    with _admin_session(settings) as db:
        org = _run(lambda: orgs.org_by_name(db, org_name))
        click.echo(json.dumps(checkpoint(db, org.id, settings.audit_secret())))


@admin.command("set-retention")
@click.option("--org", "org_name", required=True)
@click.option("--kind", "kind", type=click.Choice(RETAINED_TYPES), default=RETAINED_TYPES[0], show_default=True)
@click.option("--days", type=int, required=True, help="0 removes the policy")
def set_retention(org_name: str, kind: str, days: int) -> None:
    """Retention policy: the scheduled `retention` job deletes older items (with their derivations)."""
    from app.audit.service import record
    from app.orgs import service as orgs

    with _admin_session(Settings()) as db:
        org = _run(lambda: orgs.org_by_name(db, org_name))
        retention = dict(org.settings.get("retention", {}))
        if days > 0:
            retention[kind] = days
        else:
            retention.pop(kind, None)
        org.settings = {**org.settings, "retention": retention}
        record(
            db,
            org_id=org.id,
            actor_id=None,
            action="policy.retention",
            target_type="org",
            target_id=org.id,
            details={"kind": kind, "days": days},
        )
        db.commit()
        click.echo(str(days))


@admin.command("train-manager")
@click.option("--org", "org_name", required=True)
def train_manager(org_name: str) -> None:
    """Train the org's memory manager on its recorded decisions: a new policy version, active only
    if it beat the rules on held-out sources (prints the version's stats as JSON)."""
    import json

    from app.manager import service as manager
    from app.orgs import service as orgs

    with _admin_session(Settings()) as db:
        org = _run(lambda: orgs.org_by_name(db, org_name))
        stats = manager.train(db, org.id, actor_id=None, job_id=None)
        db.commit()
        click.echo(json.dumps(stats))


@main.group()
def db() -> None:
    """Database set-up."""


@db.command("upgrade")
@click.option("--revision", default="head")
def db_upgrade(revision: str) -> None:
    """alembic upgrade (starts the embedded Postgres when no URL is configured)."""
    from app.kit.database.migrate import upgrade

    upgrade(Settings(), revision)
    click.echo("database at " + revision)


@db.command("stop")
def db_stop() -> None:
    """Stop a stray embedded Postgres left by a killed process."""
    from app.kit.database.pg import stop_embedded

    click.echo("stopped" if stop_embedded(Settings()) else "not running")


def _prepare_local_model(settings: Settings) -> None:
    """The bundled chat model's folder, converted from its GGUF before the first request: token
    counting in /v1/context needs its tokenizer, and converting on first use made the first
    context request of a fresh data dir take ~55 s (a client with a 30 s timeout failed)."""
    from app.llm.provider import is_local

    if not is_local(settings.llm_model):
        return
    from app.kit.runtime.localmodel import converted, local_model_dir

    if not converted(settings.data_dir):
        click.echo("converting the bundled local model (once per data dir, ~30-60 s)", err=True)
    local_model_dir(settings.data_dir)


@main.command()
@click.option("--host", default=None)
@click.option("--port", default=None, type=int)
@click.option(
    "--workers",
    default=1,
    type=click.IntRange(1, 64),
    show_default=True,
    help="API processes on one port (uvicorn workers); > 1 keeps rate limits in PostgreSQL",
)
def serve(host: str | None, port: int | None, workers: int) -> None:
    """Migrate, then serve the API (docs/scale-out.md: what is per process with --workers N)."""
    import os

    import uvicorn

    from app.kit.database.migrate import upgrade
    from app.kit.database.pg import admin_url, install_sigterm_handler
    from app.kit.http.limits import proxy_options
    from app.kit.runtime import wordvectors
    from app.kit.runtime.embedding import make_embedder
    from app.main import create_app

    settings = Settings()
    proxies = proxy_options(settings.trusted_proxies)  # forwarded headers from these proxies only
    install_sigterm_handler()
    admin_url(settings)  # start (and hold) the embedded server for this process's lifetime
    upgrade(settings, "head")
    _prepare_local_model(settings)
    embedder = make_embedder(settings)
    wordvectors.ensure(embedder, say=lambda m: click.echo(m, err=True))  # the vocabulary's common words
    click.echo(f"memscale listening on http://{host or settings.host}:{port or settings.port}", err=True)
    click.echo(
        "create a key: memscale admin create-org ACME && memscale admin create-user --org ACME alice "
        "&& memscale admin create-key --org ACME --user alice",
        err=True,
    )
    if workers == 1:
        app = create_app(settings, embedder=embedder)
        uvicorn.run(app, host=host or settings.host, port=port or settings.port, log_level="warning", **proxies)
        return
    # Each worker is its own process that builds its app from the environment (Settings()); the
    # per-key budgets must then live in PostgreSQL, or each process would grant the whole budget.
    os.environ.setdefault("MEMSCALE_RATE_LIMIT_BACKEND", "postgres")
    del embedder  # each worker loads its own
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        workers=workers,
        host=host or settings.host,
        port=port or settings.port,
        log_level="warning",
        **proxies,
    )
