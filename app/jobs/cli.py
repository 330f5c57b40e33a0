"""`memscale jobs run KIND --org ORG`: one pipeline job in the foreground, with a progress bar on
stderr and the job's final JSON on stdout (exit 1 unless it succeeded)."""

from __future__ import annotations

import sys

import click

from app.config import Settings
from app.jobs.kinds import KIND_NAMES
from app.kit.cli import admin_session, app_sessions, run_or_fail


@click.group()
def jobs() -> None:
    """Run pipeline jobs in the foreground."""


@jobs.command("run")
@click.argument("kind", type=click.Choice(KIND_NAMES))
@click.option("--org", "org_name", required=True)
@click.option("--param", "params", multiple=True, help="key=value (JSON values allowed), repeatable")
@click.option("--branch", default=None, help="run in this branch of the org's memory (distill, consolidate)")
def jobs_run(kind: str, org_name: str, params, branch: str | None) -> None:
    """Run one job now with a progress bar; prints the job's final JSON."""
    import json

    parsed = {}
    for p in params:
        k, _, v = p.partition("=")
        try:
            parsed[k] = json.loads(v)
        except json.JSONDecodeError:
            parsed[k] = v
    run_in_foreground(org_name, kind, parsed, branch=branch)


def run_in_foreground(org_name: str, kind: str, params: dict, *, branch: str | None = None) -> None:
    """Create an org's job as the operator and run it in this process with a progress bar (items
    done of total when the job reports them, else percent); prints the job's JSON and exits 0 when
    it succeeded."""
    import json

    from tqdm import tqdm

    from app.auth.principal import Principal
    from app.branches.service import view_named
    from app.jobs import service as jobs_service
    from app.jobs.runner import JobContext, run_job
    from app.kit.database.db import bind_principal
    from app.orgs import service as orgs
    from app.resources import Resources

    settings = Settings()
    with admin_session(settings) as db:
        org_id = run_or_fail(lambda: orgs.org_by_name(db, org_name)).id
    operator = Principal(org_id=org_id, user_id=None, name="cli", roles=("admin",), groups=(), clearances=())
    clean = run_or_fail(lambda: jobs_service.validate_params(operator, kind, params))
    sessions = app_sessions(settings)
    with sessions() as db:
        bind_principal(db, None, org_id=org_id, all_scopes=True)
        view = run_or_fail(lambda: view_named(db, org_id, branch))
        job = run_or_fail(
            lambda: jobs_service.create(
                db, org_id=org_id, actor_id=None, kind=kind, params=clean, status="running", branch_id=view.branch_id
            )
        )
        job_id = job.id
        db.commit()
    bar = tqdm(total=100, desc=f"{kind} {org_name}", unit="%", file=sys.stderr)

    def progress(frac: float, stats: dict) -> None:
        if "total" in stats and "done" in stats:
            bar.total, bar.n, bar.unit = max(int(stats["total"]), 1), int(stats["done"]), "it"
        else:
            bar.n = int(frac * 100)
            bar.set_postfix({k: v for k, v in list(stats.items())[:4]})
        bar.refresh()

    job = run_job(
        JobContext(
            settings=settings,
            sessions=sessions,
            org_id=org_id,
            job_id=job_id,
            resources=Resources(settings),
            on_progress=progress,
        )
    )
    bar.close()
    click.echo(json.dumps({"id": str(job.id), "status": job.status, "stats": job.stats, "error": job.error}))
    sys.exit(0 if job.status == "succeeded" else 1)
