"""The vocabulary lift at a grown org: its rows from the postings vs from the item table
(`lexicon.lift_hits_select`, the statement for reads the statistics do not serve), and from the
postings with every row's pool columns read (as the item table's statement reads them), interleaved
per query (which arm goes first alternates), on the org `bench.speed.growth.stages --build N` kept.

    .venv/bin/python -m bench.speed.growth.lift_ab [--queries 60]

The growth org has no vocabulary of its own (its rows are written by SQL): the first run gives
each of the synthetic words a vector near its topic's centre (`synth`: a word belongs to the
centre whose 40 words it is one of), so that a query's nearest words are its topic's, as real
words near a question are. Prints, per arm, hybrid over turns only (k = 10) and over all types:
the whole ranking's and the lift's two statements' (its words, its rows) mean / p50 / p95 ms as
sent, and whether every query's results (ids, order, scores) were the same in both arms.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import numpy as np
from sqlalchemy import create_engine, text

from bench.common import database_settings, load_average
from bench.speed.growth.stages import DB, WORLD, _instrumented, _OnePass, _pcts

_VOCABULARY = """
INSERT INTO lexicon (org_id, lexeme, word, embedding)
SELECT CAST(:org AS uuid), x.lx, w.w, l2_normalize(c.v + s.v)
FROM bench_synth_words w
CROSS JOIN LATERAL (SELECT (tsvector_to_array(to_tsvector('english', w.w)))[1] AS lx) x
JOIN bench_synth_center c ON c.i = w.i / 40
JOIN bench_synth_sub s ON s.i = (w.i * 7) % 1021
WHERE x.lx IS NOT NULL
ON CONFLICT DO NOTHING"""


def _vocabulary(org: str) -> int:
    from app.kit.database.pg import admin_url

    eng = create_engine(admin_url(database_settings(DB)))
    with eng.begin() as c:
        have = c.execute(text("SELECT count(*) FROM lexicon WHERE org_id = :o"), {"o": org}).scalar()
        if not have:
            c.execute(text(_VOCABULARY), {"org": org})
            have = c.execute(text("SELECT count(*) FROM lexicon WHERE org_id = :o"), {"o": org}).scalar()
    eng.dispose()
    return have


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=60)
    args = ap.parse_args(argv)
    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal
    from app.search import service
    from app.search.repository import bm25_stats
    from app.search.repository import lexicon as lexicon_repo
    from app.search.service import RankCall, rank

    world = json.loads(WORLD.read_text())
    words = _vocabulary(world["org"])
    uid, groups = world["readers"]["1 group"]
    p = Principal(org_id=world["org"], user_id=uid, name="r", roles=("member",), groups=tuple(groups), clearances=())
    eng, sessions, sent = _instrumented(DB)
    print(f"{world['size']} items, {words} vocabulary words, load {load_average()}")
    arms = {"postings": (bm25_stats, False), "item table": (_OnePass(), False), "postings, all loaded": (bm25_stats, True)}
    lift_rows = service.lift_rows

    def all_loaded(*a, **kw):  # every row of the lift with its pool columns, as the item table's statement gives them
        return lift_rows(*a, **{**kw, "depth": None})

    shapes = {"turns": ("episode",), "all types": ("memory", "episode", "chunk")}
    got: dict = {(s, a): defaultdict(list) for s in shapes for a in arms}
    results: dict = {(s, a): [] for s in shapes for a in arms}
    queries = world["queries"][: args.queries + 1]
    for i, (q, vec) in enumerate(queries):  # the first one warms up
        for shape_, types in shapes.items():
            for arm in list(arms) if i % 2 else list(reversed(arms)):
                lexicon_repo.bm25_stats, service.lift_rows = arms[arm][0], all_loaded if arms[arm][1] else lift_rows
                with sessions() as db:
                    bind_principal(db, p)
                    sent.clear()
                    t0 = time.perf_counter()
                    out, info = rank(db, RankCall(principal=p, query=q, qvec=np.array(vec, dtype=np.float32), k=10, types=types))
                    dt = (time.perf_counter() - t0) * 1000
                    lift = [ms for stage, ms, *_ in sent if stage.endswith("lexicon.lift_rows")]
                    db.rollback()
                if i:
                    per = got[(shape_, arm)]
                    per["whole ranking"].append(dt)
                    per["lift: words"].append(lift[0] if lift else 0.0)
                    per["lift: rows"].append(sum(lift[1:]))
                    per["(lift's rows found)"].append(float(info.get("vocabulary", 0)))
                    results[(shape_, arm)].append([(r.type, str(r.id), r.score) for r in out])
    lexicon_repo.bm25_stats, service.lift_rows = bm25_stats, lift_rows
    for shape_ in shapes:
        first = results[(shape_, "postings")]
        same = sum(all(results[(shape_, a)][j] == r for a in arms) for j, r in enumerate(first))
        print(f"\n{shape_} (k = 10), {len(queries) - 1} queries: same results in every arm {same}/{len(queries) - 1}")
        print(f"  {'arm':20s} {'part':20s}    mean     p50     p95")
        for arm in arms:
            for part, v in got[(shape_, arm)].items():
                print(f"  {arm:20s} {part:20s} {_pcts(v)}")
    print(f"load {load_average()}")
    eng.dispose()


if __name__ == "__main__":
    main()
