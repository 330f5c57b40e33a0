"""/v1/search and /v1/context latency over HTTP at LoCoMo scale (2,760 turns, five private
users), this checkout against an earlier commit: each arm is its own API process (`python -m app
serve`, own GIL and embedder) over the same rows, and every question is asked of both arms in
turn (the order alternating), so both see the same machine load. The ids handed out are compared
per question (`answers_differ`: 0 unless the ranking itself changed between the commits).

    .venv/bin/python -m bench.tools.locomo_latency_ab [--against REV] [--reuse] [--questions 120] [--rounds 2]

Without `--against` only this checkout is measured. Each question is asked once per round: with
`--rounds 1` no measured request repeats an earlier one (caches of token counts or statements help
only across different questions, as they would in use). `--reuse` keeps the ingested database of an
earlier run (`memscale_bench_locomo_ab`; the ingest takes minutes; rebuild it after a change to
what ingest writes). Both arms read the same rows: this checkout the ingested
database; an earlier commit with an older migration head gets a copy of it taken down to that head
(`_old_copy`). Results:
bench/results/locomo_latency_ab.json (or `--out`).
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.common import ROOT

DB = "memscale_bench_locomo_ab"
KINDS = {
    "search": ("/v1/search", lambda q: {"query": q, "types": ["episode"], "k": 10}),
    "search all types": ("/v1/search", lambda q: {"query": q, "k": 10}),
    "context 1000": ("/v1/context", lambda q: {"query": q, "budget_tokens": 1000}),
}


def _database(reuse: bool, convs):
    """Settings of the ingested LoCoMo database (built unless `reuse` finds it)."""
    from sqlalchemy import create_engine, text

    from bench.common import existing_database

    s = existing_database(DB) if reuse else None
    if s is not None:
        eng = create_engine(s.database_url)
        with eng.connect() as c:
            ready = c.execute(text("SELECT count(*) FROM orgs WHERE name = 'locomo'")).scalar()
        eng.dispose()
        if ready:
            return s
    from bench.quality.locomo.run import Service

    svc = Service(DB, convs, model="local/smollm2")
    t0 = time.perf_counter()
    for c in convs:
        svc.ingest(c)
    print("ingest s", round(time.perf_counter() - t0, 1), flush=True)
    svc.settle()
    svc.close()
    return svc.settings


def _old_copy(s, old_tree: Path):
    """The earlier commit's database: a copy of this one (same rows, same ids), taken down to that
    commit's migration head by this checkout's migrations (the earlier code cannot read a later
    schema, and cannot downgrade what it does not know)."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from app.kit.database.migrate import downgrade
    from bench.common import _server, database_settings

    head = _head(old_tree)
    db = make_url(s.database_url).database
    eng = _server()
    with eng.connect() as c:
        c.execute(text(f"DROP DATABASE IF EXISTS {db}_old WITH (FORCE)"))
        c.execute(text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}'"))
        c.execute(text(f"CREATE DATABASE {db}_old TEMPLATE {db}"))
    eng.dispose()
    old = database_settings(f"{db}_old")
    downgrade(old, head)
    return old


def _head(tree: Path) -> str:
    """The migration head of a checkout (its own migrations folder)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config(str(tree / "alembic.ini"))
    cfg.set_main_option("script_location", str(tree / "migrations"))
    return ScriptDirectory.from_config(cfg).get_current_head()


def ingested(reuse: bool):
    """(conversations, settings, a key per conversation's user, {episode id: LoCoMo dia_id}) of the
    ingested LoCoMo database, for the benches that ask it in one process (stages, rewrite_pilot)."""
    from sqlalchemy import create_engine, text

    from bench.quality.locomo.data import load

    convs = load()
    s = _database(reuse, convs)
    keys = locomo_keys(s, convs)
    eng = create_engine(s.database_url)
    with eng.connect() as c:
        dia = {str(r[0]): r[1] for r in c.execute(text("SELECT id, metadata->>'dia_id' FROM episodes"))}
    eng.dispose()
    return convs, s, keys, dia


def evidence_recall(q, handed: set) -> float:
    """The share of a question's evidence turns (dia_ids) among those `handed` out."""
    return sum(e in handed for e in q.evidence) / len(q.evidence)


def locomo_keys(s, convs, *, create: bool = False) -> dict:
    """A fresh key for each conversation's user of the org `locomo` (`create`: the org and the users
    too, in an empty database)."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from app.orgs import service as orgs

    eng = create_engine(s.database_url)
    with Session(eng, expire_on_commit=False) as db:
        org = orgs.create_org(db, "locomo") if create else orgs.org_by_name(db, "locomo")
        users = {
            c.sample_id: orgs.create_user(db, org, c.sample_id) if create else orgs.user_by_name(db, org, c.sample_id)
            for c in convs
        }
        keys = {sid: orgs.create_key(db, u) for sid, u in users.items()}
        db.commit()
    eng.dispose()
    return keys


def _handed(kind: str, body: dict) -> list:
    """What a response handed out, in order (the arms must agree)."""
    if kind.startswith("search"):
        return [r["id"] for r in body["results"]]
    return [body["text"]]


def main(argv: list[str] | None = None) -> dict:
    from bench.common import worktree
    from bench.quality.locomo.data import load

    ap = argparse.ArgumentParser(
        prog="python -m bench.tools.locomo_latency_ab", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--against", default=None, help="an earlier commit to measure beside this one")
    ap.add_argument("--reuse", action="store_true", help=f"reuse the database {DB} of an earlier run")
    ap.add_argument("--questions", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)

    convs = load()
    s = _database(a.reuse, convs)
    keys = locomo_keys(s, convs)  # the copy for an earlier commit (below) is taken after: same keys
    qs = [(c.sample_id, q.question) for c in convs for q in c.qa]
    random.seed(1)
    picked = random.sample(qs, a.questions + 8)
    sample, warm = picked[: a.questions], picked[a.questions :]  # warm-up questions are never measured
    procs: dict = {}
    with worktree(a.against) as old_tree:
        try:
            return measure(a, s, old_tree, keys, sample, warm, procs, name="locomo_latency_ab")
        finally:
            for p in procs.values():
                p.stop()


def measure(a, s, old_tree: Path | None, keys: dict, sample: list, warm: list, procs: dict, *, name: str) -> dict:
    """Both arms started over database `s` (an earlier commit's on `_old_copy`), warmed with `warm`
    and measured on `sample` ((key name, question) pairs; `a`: against, rounds, out), the result
    written as bench/results/`name`.json unless `a.out` (`procs` holds them for the caller to stop)."""
    import httpx

    from bench.common import ApiProcess, arm_row, load_average, write_result

    arms = {"new": ROOT, **({"old": old_tree} if old_tree else {})}
    dbs = {"new": s, "old": _old_copy(s, old_tree)} if old_tree else {"new": s}
    for arm, cwd in arms.items():
        procs[arm] = ApiProcess(dbs[arm], cwd=cwd, env={"MEMSCALE_RATE_LIMIT_PER_MINUTE": "0"})
    for p in procs.values():
        p.wait_ready()
    http = {n: httpx.Client(base_url=p.base, timeout=120) for n, p in procs.items()}

    def ask(n: str, kind: str, sid: str, q: str):
        path, body = KINDS[kind]
        t = time.perf_counter()
        r = http[n].post(path, json=body(q), headers={"Authorization": f"Bearer {keys[sid]}"})
        ms = (time.perf_counter() - t) * 1000
        if r.status_code != 200:
            raise RuntimeError(f"{n} {kind}: {r.status_code} {r.text[:300]}")
        return ms, _handed(kind, r.json())

    for n in procs:  # warm-up: the first requests load the models (other questions than those measured)
        for sid, q in warm:
            for kind in KINDS:
                ask(n, kind, sid, q)
    lat = {k: {n: [] for n in procs} for k in KINDS}
    differ = {k: 0 for k in KINDS}
    loads = [load_average()]
    for rnd in range(a.rounds):
        for kind in KINDS:
            for i, (sid, q) in enumerate(sample):
                order = list(procs) if (i + rnd) % 2 == 0 else list(reversed(procs))
                got = {}
                for n in order:
                    ms, got[n] = ask(n, kind, sid, q)
                    lat[kind][n].append(ms)
                differ[kind] += len(set(map(tuple, got.values()))) > 1
        loads.append(load_average())
    out: dict = {"against": a.against, "questions": a.questions, "rounds": a.rounds, "load": loads, "kinds": {}}
    for kind in KINDS:
        row = arm_row(lat[kind])
        if "old" in row:
            row["answers_differ"] = differ[kind]
        out["kinds"][kind] = row
        print(kind, row, flush=True)
    print("load", loads)
    write_result(name, out, a.out)
    return out


if __name__ == "__main__":
    main()
