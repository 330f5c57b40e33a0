"""bench/speed/bm25_buckets: BM25's text stage, the exact statement (N and df counted over every
visible row) vs the statistics kept per visibility bucket with the index-driven, pruned top-n,
side by side (interleaved) at growing org sizes; and the write cost of keeping them.

    .venv/bin/python -m bench.speed.bm25_buckets [--sizes 20000,200000] [--queries 100]
    .venv/bin/python -m bench.speed.bm25_buckets --locomo 2   # same answers on LoCoMo dev's questions

One org grows through `--sizes` episodes of bench.speed.service's synthetic sentences (no
embeddings: only the text stage is timed), inserted 1,000 per statement; scopes: 5 % org-visible,
30 % shared with one of 10 groups, the rest private to one of 50 users; the caller is in 2
groups. Ingest: 500-row INSERT statements into another org, the triggers on and off alternating.
`--locomo N`: the first N LoCoMo dev conversations' turns (one org each; a turn private to its
speaker with odds 1/3, else org-visible; ranked by the other speaker), every question ranked both
ways (the kept path at any size): on how many the top 10 (ids, order) and the whole top 100 (ids
and scores) are identical. The size bench runs what ships: the kept path from KEPT_FROM visible rows.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from bench.common import fresh_database
from bench.speed.service.data import query, sentence

INSERT = (
    "INSERT INTO episodes (kind, content, org_id, owner_id, visibility, groups) SELECT 'note', x->>'t', "
    "CAST(:o AS uuid), (x->>'u')::uuid, x->>'v', ARRAY(SELECT jsonb_array_elements_text(x->'g')) "
    "FROM jsonb_array_elements(CAST(:rows AS jsonb)) x"
)


def _rows(rng: random.Random, users: list, n: int) -> str:
    out = []
    for _ in range(n):
        r = rng.random()
        vis, groups = ("org", []) if r < 0.05 else ("group", [f"g{rng.randrange(10)}"]) if r < 0.35 else ("private", [])
        out.append({"t": sentence(rng), "u": str(rng.choice(users)), "v": vis, "g": groups})
    return json.dumps(out)


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return round(1000 * xs[min(len(xs) - 1, int(p * len(xs)))], 2)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="20000,200000")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--ingest", type=int, default=5000, help="rows per arm of the ingest A/B")
    ap.add_argument("--locomo", type=int, default=0, help="LoCoMo dev conversations to compare on (0: the size bench)")
    ap.add_argument("--data", default=None, help="LoCoMo JSON (default: bench.quality.locomo's)")
    args = ap.parse_args(argv)
    if args.locomo:
        return locomo(args.locomo, args.data)
    rng = random.Random(11)

    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal, make_sessionmaker
    from app.kit.database.pg import app_url
    from app.orgs import service as orgs
    from app.search.repository import bm25
    from app.search.schemas import SearchFilters

    settings = fresh_database("memscale_bench_bm25")
    admin = create_engine(settings.database_url)
    with Session(admin, expire_on_commit=False) as db:
        org, side = orgs.create_org(db, "big"), orgs.create_org(db, "ingest")
        users = [orgs.create_user(db, org, f"u{i}", groups=[f"g{i % 10}", f"g{(i + 3) % 10}"]).id for i in range(50)]
        writer = orgs.create_user(db, side, "w").id
        db.commit()
    out: dict = {"ingest": {}, "search": {}}

    # The write cost: the same 500-row statements with the statistics' triggers on and off, alternating.
    times: dict[str, list] = {"on": [], "off": []}
    with admin.connect() as c:
        for i in range(2 * args.ingest // 500):
            arm = "on" if i % 2 == 0 else "off"
            rows = _rows(rng, [writer], 500)
            if arm == "off":
                c.execute(text("ALTER TABLE episodes DISABLE TRIGGER bm25_keep_ins"))
                c.commit()
            t0 = time.perf_counter()
            c.execute(text(INSERT), {"o": side.id, "rows": rows})
            c.commit()
            times[arm].append(time.perf_counter() - t0)
            if arm == "off":
                c.execute(text("ALTER TABLE episodes ENABLE TRIGGER bm25_keep_ins"))
                c.commit()
    rate = {arm: round(500 * len(ts) / sum(ts), 1) for arm, ts in times.items()}
    out["ingest"] = {
        "rows_per_s_triggers_on": rate["on"],
        "rows_per_s_triggers_off": rate["off"],
        "on_vs_off": round(rate["on"] / rate["off"], 3),
    }
    print("ingest (500-row INSERTs, DB only)", out["ingest"], flush=True)

    sessions = make_sessionmaker(create_engine(app_url(settings)))
    p = Principal(org_id=org.id, user_id=users[0], name="u0", roles=("member",), groups=("g0", "g3"), clearances=())
    queries = [query(rng) for _ in range(args.queries)]
    have = 0
    for size in [int(s) for s in args.sizes.split(",")]:
        t0 = time.perf_counter()
        with admin.connect() as c:
            while have < size:
                step = min(1000, size - have)
                c.execute(text(INSERT), {"o": org.id, "rows": _rows(rng, users, step)})
                c.commit()
                have += step
            build_s = time.perf_counter() - t0
            c.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE episodes, bm25_df, bm25_buckets"))
        lat: dict[str, list] = {"exact": [], "kept": []}
        same = 0
        for i, q in enumerate(queries):
            got = {}
            for arm in ("exact", "kept") if i % 2 else ("kept", "exact"):
                with sessions() as db:
                    bind_principal(db, p)
                    t1 = time.perf_counter()
                    got[arm] = bm25.text_scored(db, p, "episode", q, SearchFilters(), 100, exact=arm == "exact")
                    lat[arm].append(time.perf_counter() - t1)
                    db.rollback()
            same += got["exact"][0][:10] == got["kept"][0][:10] and got["exact"][1] == got["kept"][1]
        with sessions() as db:
            bind_principal(db, p)
            visible = bm25.visible_count(db, p, "episode", SearchFilters())
        row = {
            "org_rows": size,
            "visible": visible,
            "build_s": round(build_s, 1),
            "same_top10_and_n": f"{same}/{len(queries)}",
            **{f"{arm}_p50_ms": _pct(v, 0.5) for arm, v in lat.items()},
            **{f"{arm}_p95_ms": _pct(v, 0.95) for arm, v in lat.items()},
            "kept_mean_ms": round(1000 * statistics.mean(lat["kept"]), 2),
        }
        out["search"][size] = row
        print("text stage (top 100)", row, flush=True)
    return out


def locomo(conversations: int, path: str | None = None) -> dict:
    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal, make_sessionmaker
    from app.kit.database.pg import app_url
    from app.orgs import service as orgs
    from app.search.repository import bm25, expansion
    from app.search.schemas import SearchFilters
    from app.search.tuning import DEFAULT_TUNING as tun

    rng = random.Random(3)
    settings = fresh_database("memscale_bench_bm25_locomo")
    admin = create_engine(settings.database_url)
    sessions = make_sessionmaker(create_engine(app_url(settings)))
    from app.search.repository import bm25_stats
    from bench.quality.locomo.data import DEFAULT

    bm25_stats.KEPT_FROM = 0  # these orgs are small: compare the kept path itself

    with open(path or DEFAULT) as fh:
        data = json.load(fh)[:conversations]
    same10 = same100 = total = 0
    second = {"same_words_rows_scores": 0, "same_top10": 0, "asked": 0}  # context's second round, kept vs one pass
    qvec = [1.0] + [0.0] * 383
    for conv in data:
        c = conv["conversation"]
        with Session(admin, expire_on_commit=False) as db:
            org = orgs.create_org(db, conv["sample_id"])
            who = {name: orgs.create_user(db, org, name).id for name in (c["speaker_a"], c["speaker_b"])}
            db.commit()
        turns = [t for k, v in c.items() if k.startswith("session_") and isinstance(v, list) for t in v]
        rows = [
            {"t": t["text"], "u": str(who[t["speaker"]]), "v": "private" if rng.random() < 1 / 3 else "org", "g": []}
            for t in turns
        ]
        with admin.begin() as cx:
            cx.execute(text(INSERT), {"o": org.id, "rows": json.dumps(rows)})
        p = Principal(org_id=org.id, user_id=who[c["speaker_b"]], name="b", roles=("member",), groups=(), clearances=())
        for qa in conv["qa"]:
            with sessions() as db:
                bind_principal(db, p)
                kept = bm25.text_scored(db, p, "episode", qa["question"], SearchFilters(), 100)
                exact = bm25.text_scored(db, p, "episode", qa["question"], SearchFilters(), 100, exact=True)
                seeds = [i for i, _ in exact[0][: tun.expand_from]]
                asked = dict(hit_ids=seeds, query=qa["question"], qvec=qvec, n_terms=tun.expand_terms, n=tun.expand_depth)
                kept2 = expansion.expansion_rows(db, p, "episode", SearchFilters(), **asked)
                bm25_stats.KEPT_FROM = 10**12  # the one-pass statement
                exact2 = expansion.expansion_rows(db, p, "episode", SearchFilters(), **asked)
                bm25_stats.KEPT_FROM = 0
                db.rollback()
            if seeds:
                second["asked"] += 1
                second["same_words_rows_scores"] += [tuple(r) for r in kept2] == [tuple(r) for r in exact2]
                second["same_top10"] += [r.id for r in kept2[:10]] == [r.id for r in exact2[:10]]
            total += 1
            same10 += [i for i, _ in kept[0][:10]] == [i for i, _ in exact[0][:10]]
            same100 += kept == exact
    out = {
        "conversations": conversations,
        "questions": total,
        "same_top10": same10,
        "same_top100_and_scores": same100,
        "second_round": second,
    }
    print("LoCoMo dev, kept vs exact BM25", out, flush=True)
    return out


if __name__ == "__main__":
    main()
