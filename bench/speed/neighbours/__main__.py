"""bench/speed/neighbours: the cost of fetching the turns around retrieved conversation turns
(`app.search.repository.neighbour_ids`, used by /v1/context) in long sessions, with the
session index ordered by time (migration 0008) and, side by side, with the index it replaced.

    .venv/bin/python -m bench.speed.neighbours [--turns 60000] [--sessions 3] [--hits 30]

A fresh database `memscale_bench_neighbours`; one user's turns spread over a few sessions;
`--hits` random turns as the retrieved ones. Figures to stdout and bench/results/neighbours.json.
"""

from __future__ import annotations

import time

from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from bench.command import parser, save
from bench.common import fresh_database, summary_ms


def main(argv: list[str] | None = None) -> dict:
    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal, make_engine, make_sessionmaker
    from app.kit.database.pg import app_url
    from app.orgs import service as orgs
    from app.search.repository import neighbour_ids

    ap = parser(__doc__, "neighbours")
    ap.add_argument("--turns", type=int, default=60_000)
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--hits", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args(argv)
    settings = fresh_database("memscale_bench_neighbours")
    admin = create_engine(settings.database_url)
    with Session(admin, expire_on_commit=False) as db:
        org = orgs.create_org(db, "bench")
        user = orgs.create_user(db, org, "u")
        db.commit()
    with admin.begin() as c:
        c.execute(
            text(
                "INSERT INTO episodes (id, org_id, owner_id, kind, content, session_id, occurred_at, visibility, "
                "groups, labels) SELECT gen_random_uuid(), :o, :u, 'conversation', 'turn ' || g, 's' || (g % :s), "
                "now() - g * interval '1 second', 'private', '{}', '{}' FROM generate_series(1, :n) g"
            ),
            {"o": org.id, "u": user.id, "s": args.sessions, "n": args.turns},
        )
        c.execute(text("ANALYZE episodes"))
        hits = [r[0] for r in c.execute(text("SELECT id FROM episodes ORDER BY random() LIMIT :h"), {"h": args.hits})]
    me = Principal(org.id, user.id, "u", (), (), ())
    engine = make_engine(app_url(settings), pool_size=1)
    sessions = make_sessionmaker(engine)

    def timed() -> dict:
        times = []
        for _ in range(args.repeat):
            with sessions() as db:
                bind_principal(db, me)
                t0 = time.perf_counter()
                pairs = neighbour_ids(db, me, hits)
                times.append(time.perf_counter() - t0)
        assert len(pairs) <= 2 * len(hits)
        return {**summary_ms(times), "pairs": len(pairs)}

    out = {"turns": args.turns, "sessions": args.sessions, "hits": args.hits, "session_time_index": timed()}
    with admin.begin() as c:  # the index migration 0008 replaced
        c.execute(text("CREATE INDEX ix_episodes_session ON episodes (org_id, session_id)"))
        c.execute(text("DROP INDEX ix_episodes_session_time"))
        c.execute(text("ANALYZE episodes"))
    out["old_session_index"] = timed()
    engine.dispose()
    admin.dispose()
    print(f"bench/speed/neighbours  {args.turns} turns in {args.sessions} sessions, {args.hits} hits")
    for k in ("session_time_index", "old_session_index"):
        print(f"  {k:<20} p50 {out[k]['p50_ms']:>8} ms  p95 {out[k]['p95_ms']:>8} ms  ({out[k]['pairs']} pairs)")
    return save(args.out, out)


if __name__ == "__main__":
    main()
