"""The kept text top n's two forms per query: MaxScore vs one aggregate over every query lexeme's
postings (`bm25_stats.FLAT_UP_TO` chooses between them by the caller's summed df), timed on the
same N and df, warm, best of three alternations, results compared; how `FLAT_UP_TO` was set
(docs/search.md, "MaxScore only where it pays").

    .venv/bin/python -m bench.tools.maxscore_xover --db memscale_bench_scale_hash --org scale-0001 [--queries 60]
    .venv/bin/python -m bench.tools.maxscore_xover --db memscale_bench_growth --org growth --growth-queries

Prints, per org, the total ms of either form over the queries and a sample of queries by summed
df; writes every query's figures to --out (default bench/results/maxscore_xover_<org>.json).
"""

from __future__ import annotations

import argparse
import json
import time

from sqlalchemy import create_engine

from bench.common import ROOT, database_settings


def _timed(db, p, t, quoted, dfs, big_n, flat: bool):
    from app.search.repository import bm25_stats
    from app.search.schemas import SearchFilters

    bm25_stats.FLAT_UP_TO = 10**15 if flat else 0
    t0 = time.perf_counter()
    rows = bm25_stats.top_scored(db, p, t, SearchFilters(), quoted=quoted, n=100, big_n=big_n, dfs=dfs)
    return (time.perf_counter() - t0) * 1000, rows


def main(argv: list[str] | None = None) -> list[dict]:
    from app.kit.database.db import bind_principal
    from app.kit.database.pg import admin_url
    from app.search.repository import bm25_stats
    from app.search.repository.bm25 import query_lexemes, tsquery_lexeme
    from bench.speed.growth.stages import _instrumented
    from bench.speed.scale import measure

    ap = argparse.ArgumentParser(prog="python -m bench.tools.maxscore_xover", description=__doc__)
    ap.add_argument("--db", required=True)
    ap.add_argument("--org", required=True)
    ap.add_argument("--reader", default="u0")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--growth-queries", action="store_true", help="the growth bench's queries (its synthetic words)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    settings = database_settings(a.db)
    admin = create_engine(admin_url(settings))
    p, _ = measure.reader(admin, settings, a.org, a.reader)
    if a.growth_queries:
        from bench.speed.growth.synth import query_vectors

        raw = admin.raw_connection()
        qs = [t for t, _ in query_vectors(raw, a.queries)]
        raw.close()
    else:
        qs = measure.queries(a.queries)
    admin.dispose()
    eng, sessions, _ = _instrumented(a.db)
    keep, out = bm25_stats.FLAT_UP_TO, []
    try:
        for q in qs:
            for t in ("episode", "memory"):
                with sessions() as db:
                    bind_principal(db, p)
                    lex = query_lexemes(db, q)
                    if not lex:
                        continue
                    big_n, dfs = bm25_stats.caller_stats(db, p, t, lex)
                    quoted = {w: tsquery_lexeme(w) for w in lex}
                    args = (db, p, t, quoted, dfs, big_n)
                    _timed(*args, False), _timed(*args, True)  # warm
                    pruned, flat = [], []
                    for _ in range(3):
                        a_ms, a_rows = _timed(*args, False)
                        b_ms, b_rows = _timed(*args, True)
                        assert a_rows == b_rows, (q, t)
                        pruned.append(a_ms)
                        flat.append(b_ms)
                    db.rollback()
                out.append(
                    {
                        "type": t,
                        "n": big_n,
                        "sum_df": sum(dfs),
                        "lexemes": len(lex),
                        "maxscore_ms": min(pruned),
                        "flat_ms": min(flat),
                    }
                )
    finally:
        bm25_stats.FLAT_UP_TO = keep
        eng.dispose()
    print(
        f"{a.db} {a.org}: {len(out)} calls, MaxScore {sum(o['maxscore_ms'] for o in out):.1f} ms, one aggregate "
        f"{sum(o['flat_ms'] for o in out):.1f} ms in all; by summed df:"
    )
    for o in sorted(out, key=lambda o: o["sum_df"])[:: max(1, len(out) // 12)]:
        ms = f"MaxScore {o['maxscore_ms']:6.2f}  aggregate {o['flat_ms']:6.2f}"
        print(f"  {o['type']:8s} N {o['n']:6d} summed df {o['sum_df']:6d}  {ms}")
    path = a.out or ROOT / "bench" / "results" / f"maxscore_xover_{a.org}.json"
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
