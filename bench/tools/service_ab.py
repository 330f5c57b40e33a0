"""bench.speed.service's database over HTTP, this checkout against an earlier commit: `/v1/search` (one
type and all types) and `/v1/context` for the bench user (5% of the org visible), each arm its own
API process (`python -m app serve`) over the same rows, every query asked of both arms in turn
(the order alternating), so both see the same machine load. The issue-13 rule "the 100k
bench/speed/service latencies must not regress by more than 10%" is measured with it.

    .venv/bin/python -m bench.speed.service --n 100000          # builds memscale_bench (~25 min)
    .venv/bin/python -m bench.tools.service_ab --against REV [--questions 100] [--rounds 1]

An earlier commit with an older migration head gets a copy of the rows taken down to that head
(bench/tools/locomo_latency_ab.py `_old_copy`). Results: bench/results/service_ab.json (or `--out`).
"""

from __future__ import annotations

import os
import random

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

DB = "memscale_bench"


def main(argv: list[str] | None = None) -> dict:
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    from app.orgs import service as orgs
    from bench.command import parser
    from bench.common import existing_database, worktree
    from bench.speed.service.data import query
    from bench.tools.locomo_latency_ab import measure

    ap = parser(__doc__, "service_ab")
    ap.add_argument("--against", default=None, help="an earlier commit to measure beside this one")
    ap.add_argument("--questions", type=int, default=100, help="queries measured (bench.speed.service.data)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=11)
    a = ap.parse_args(argv)

    s = existing_database(DB)
    if s is None:
        raise SystemExit(f"no database {DB}: run `python -m bench.speed.service --n 100000` first")
    eng = create_engine(s.database_url)
    with Session(eng, expire_on_commit=False) as db:
        org = orgs.org_by_name(db, "bench")
        key = orgs.create_key(db, orgs.user_by_name(db, org, "u0"))
        db.commit()
        n = db.execute(text("SELECT count(*) FROM episodes WHERE org_id = :o"), {"o": org.id}).scalar()
    eng.dispose()
    print(f"{DB}: {n} episodes in org bench", flush=True)
    rng = random.Random(a.seed)
    qs = [("u0", query(rng)) for _ in range(a.questions + 8)]
    sample, warm = qs[: a.questions], qs[a.questions :]  # warm-up queries are never measured
    procs: dict = {}
    with worktree(a.against) as old_tree:
        try:
            return measure(a, s, old_tree, {"u0": key}, sample, warm, procs, name="service_ab")
        finally:
            for p in procs.values():
                p.stop()


if __name__ == "__main__":
    main()
