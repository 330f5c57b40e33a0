"""What a request costs beyond its own work: the same cheap requests over HTTP against this
checkout's API and, side by side, against an earlier commit's (`--against REV`), each as its own
`python -m app serve` process on the same fresh database, interleaved block by block so that the
shared machine's load falls on both alike.

    .venv/bin/python -m bench.tools.service_overhead [--against c1fe854] [--rounds 20] [--block 25]

Requests: `GET /healthz` (no key, no database), an authenticated `GET /v1/episodes/{unknown}`
(key lookup, RLS binding, the permission check, one indexed miss: a 404), an authenticated GET of
an episode (the same plus its read recorded: a write and a commit), and `POST /v1/search` with a
query word matching nothing (query embedding and an empty ranking). Figures (p50 / p95 ms per
arm, and the ratio new / old) go to stdout and bench/results/overhead.json.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx

from bench.command import parser, save
from bench.common import ROOT, ApiProcess, arm_row, fresh_database, worktree


def _old_database(s):
    """The earlier commit's database: created empty (its own process migrates it), same data dir."""
    return fresh_database("memscale_bench_overhead_old", migrate=False).model_copy(update={"data_dir": s.data_dir})


def _key(s) -> str:
    """An org with one user in the arm's (migrated) database; that user's key."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from app.orgs import service as orgs

    eng = create_engine(s.database_url)
    with Session(eng, expire_on_commit=False) as db:
        org = orgs.create_org(db, "overhead")
        key = orgs.create_key(db, orgs.create_user(db, org, "u"))
        db.commit()
    eng.dispose()
    return key


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "overhead")
    ap.add_argument("--against", default=None, help="an earlier commit to measure side by side")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--block", type=int, default=25, help="requests per arm and kind in a row")
    a = ap.parse_args(argv)

    s = fresh_database("memscale_bench_overhead")
    s = s.model_copy(update={"data_dir": Path(s.data_dir).resolve()})
    procs: dict[str, ApiProcess] = {}
    with worktree(a.against) as old_tree:
        try:
            return _measure(a, s, old_tree, procs)
        finally:
            for p in procs.values():
                p.stop()


def _measure(a, s, old_tree: Path | None, procs: dict) -> dict:
    """Both arms started, warmed and measured (`procs` holds them for the caller to stop)."""
    arms = {"old": old_tree, "new": ROOT} if old_tree else {"new": ROOT}
    # Each arm its own database, migrated by its own code (an earlier commit cannot start on a
    # database at a later revision): the old one starts empty and its process migrates it.
    dbs = {"new": s, "old": _old_database(s)} if a.against else {"new": s}
    for name, cwd in arms.items():
        procs[name] = ApiProcess(dbs[name], cwd=cwd, env={"MEMSCALE_RATE_LIMIT_PER_MINUTE": "0"})
    for p in procs.values():
        p.wait_ready()
    clients = {
        n: httpx.Client(base_url=p.base, headers={"Authorization": f"Bearer {_key(dbs[n])}"}, timeout=30)
        for n, p in procs.items()
    }
    eids = {}
    for n, c in clients.items():
        c.arm = n
        some = c.post("/v1/episodes", json={"kind": "note", "content": "overhead probe: a kiln note"})
        some.raise_for_status()
        eids[n] = some.json()["id"]
    kinds = {
        "healthz": lambda c: c.get("/healthz"),
        "get_404": lambda c: c.get(f"/v1/episodes/{uuid.uuid4()}"),
        "get_200": lambda c: c.get(f"/v1/episodes/{eids[c.arm]}"),
        "search_empty": lambda c: c.post("/v1/search", json={"query": "zyxwvutsrq", "k": 5}),
    }
    want = {"healthz": 200, "get_404": 404, "get_200": 200, "search_empty": 200}
    times: dict = {k: {n: [] for n in procs} for k in kinds}
    for c in clients.values():  # warm both: first requests load code and fill caches
        for _k, f in kinds.items():
            for _ in range(5):
                f(c)
    for r in range(a.rounds):
        order = list(procs) if r % 2 == 0 else list(reversed(procs))
        for k, f in kinds.items():
            for n in order:
                for _ in range(a.block):
                    t = time.perf_counter()
                    resp = f(clients[n])
                    times[k][n].append((time.perf_counter() - t) * 1000)
                    if resp.status_code != want[k]:
                        raise RuntimeError(f"{n} {k}: {resp.status_code} {resp.text[:200]}")
    out: dict = {"against": a.against, "rounds": a.rounds, "block": a.block, "requests": {}}
    for k in kinds:
        row = arm_row(times[k], digits=2)
        out["requests"][k] = row
        print(k, row)
    for c in clients.values():
        c.close()
    return save(a.out, out)


if __name__ == "__main__":
    main()
