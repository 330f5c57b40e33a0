"""bench/speed/postings: the text top n over the postings (`bm25_stats.top_scored`, migration 0033:
MaxScore over `bm25_postings`) vs another commit's `top_scored` (`--against`, default 6a25bf8^:
the GIN lookup `bm25_hits_<type>` + MaxScore), side by side on a grown org; and the write cost.

    .venv/bin/python -m bench.speed.growth.stages --build 200000      # the growth bench's org, kept
    .venv/bin/python -m bench.speed.postings [--queries 30] [--against 6a25bf8^] [--explain]
    .venv/bin/python -m bench.speed.bm25_buckets --sizes 200000 --queries 20 # the text-only org, kept
    .venv/bin/python -m bench.speed.postings --text-org [--queries 40]
    .venv/bin/python -m bench.speed.postings --scale memscale_bench_scale_hash   # bench/speed/scale's 200k org
    .venv/bin/python -m bench.speed.postings --ingest 20              # database-only insert rate

Both arms get the same N and df (`caller_stats`), top 100, memories and turns; the arms alternate
per query (which goes first too), the first query untimed; ms per call, client side. Every call's
ids and scores must be identical (counted). Readers: the growth bench's reader in g0 and its
reader in no group (both own shared rows in groups they are not in: the owner's odd rows), and a
caller in g0 who owns nothing. `--explain`: the heaviest call (the other arm's slowest) of each
reader, every statement of both arms under `EXPLAIN (ANALYZE, BUFFERS)`, twice (the second, warm,
printed); `--explain-median` the same for each reader's median call; `--reader NAME` one reader
only. Also prints the org's postings and how many of them are the owner's copies of shared rows
(one per lexeme of each counted shared row). `--ingest R`: R rounds of three 500-row episode
`INSERT`s into another org, alternating the trigger functions of 0034 (insert-only branch without
netting), 0033, 0024 and none.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import subprocess
import time
import types
import uuid
from pathlib import Path

from sqlalchemy import create_engine, event, text

from bench.common import database_settings, load_average
from bench.speed.growth.stages import DB, WORLD

TEXT_DB = "memscale_bench_bm25"
MIGRATION = Path("migrations/versions/20261208_bm25_postings.py")
INSERT_MIGRATION = Path("migrations/versions/20261209_bm25_insert_trigger.py")


class _Prefixed:
    """A statement cache whose keys are set apart, so that two modules' `bm25_top` never share one."""

    def __init__(self, inner, prefix: str):
        self.inner, self.prefix = inner, prefix

    def run(self, db, key, build, values=None):
        return self.inner.run(db, (self.prefix,) + key, build, values)


def _against(commit: str):
    src = subprocess.run(
        ["git", "show", f"{commit}:app/search/repository/bm25_stats.py"], capture_output=True, text=True, check=True
    ).stdout
    mod = types.ModuleType("bm25_stats_against")
    exec(compile(src, f"{commit}:bm25_stats.py", "exec"), mod.__dict__)
    mod.STATEMENTS = _Prefixed(mod.STATEMENTS, "against")
    return mod


def _migration(path: Path = MIGRATION):
    spec = importlib.util.spec_from_file_location(f"bm25_migration_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p * len(xs)))], 1)


def _principal(org, uid, groups):
    from app.auth.principal import Principal

    return Principal(org_id=org, user_id=uid, name="r", roles=("member",), groups=tuple(groups), clearances=())


def _growth_org() -> tuple[str, dict, dict, list, tuple]:
    """The growth bench's org: (database, world, readers, queries, types)."""
    world = json.loads(WORLD.read_text())
    org = world["org"]
    (u1, g1), (u2, g2) = world["readers"]["1 group"], world["readers"]["no group"]
    readers = {
        "g0, owner": _principal(org, u1, g1),
        "g0, owns nothing": _principal(org, str(uuid.uuid4()), g1),
        "no group, owner": _principal(org, u2, g2),
    }
    return DB, world, readers, [w for w, _ in world["queries"]], ("memory", "episode")


def _text_org(queries: int) -> tuple[str, dict, dict, list, tuple]:
    """bench.speed.bm25_buckets' org (`--sizes 200000`, kept in its database): turns only, its
    synthetic sentences' queries; u0 is in two groups, u1 (g1, g4) read as a caller in no group."""
    from bench.speed.service.data import query

    eng = create_engine(database_settings(TEXT_DB).database_url)
    with eng.connect() as c:
        org = str(c.execute(text("SELECT id FROM orgs WHERE name = 'big'")).scalar_one())
        users = dict(c.execute(text("SELECT name, id::text FROM users WHERE org_id = :o"), {"o": org}).all())
        size = c.execute(text("SELECT count(*) FROM episodes WHERE org_id = :o"), {"o": org}).scalar_one()
    eng.dispose()
    readers = {
        "u0 in 2 groups, owner": _principal(org, users["u0"], ("g0", "g3")),
        "in 2 groups, owns nothing": _principal(org, str(uuid.uuid4()), ("g0", "g3")),
        "no group, owner": _principal(org, users["u1"], ()),
    }
    rng = random.Random(3)
    return TEXT_DB, {"org": org, "size": size}, readers, [query(rng) for _ in range(queries + 1)], ("episode",)


def _scale_org(db_name: str, queries: int) -> tuple[str, dict, dict, list, tuple]:
    """bench/speed/scale's largest org (`scale-0000`, kept in its database): its reader u0 (an owner of
    shared rows in groups it is not in) and a caller in u0's groups who owns nothing; queries of three
    words drawn from 200 of the org's own turns."""
    eng = create_engine(database_settings(db_name).database_url)
    with eng.connect() as c:
        org = str(c.execute(text("SELECT id FROM orgs WHERE name = 'scale-0000'")).scalar_one())
        u0, groups = c.execute(text("SELECT id::text, groups FROM users WHERE org_id = :o AND name = 'u0'"), {"o": org}).one()
        turns = c.execute(text("SELECT content FROM episodes WHERE org_id = :o ORDER BY id LIMIT 200"), {"o": org}).scalars()
        words = [[w for w in t.split() if w.isalpha() and len(w) > 3] for t in turns]
        size = c.execute(text("SELECT count(*) FROM episodes WHERE org_id = :o"), {"o": org}).scalar_one()
    eng.dispose()
    rng = random.Random(5)
    readers = {
        "u0, owner": _principal(org, u0, tuple(groups)),
        "u0's groups, owns nothing": _principal(org, str(uuid.uuid4()), tuple(groups)),
    }
    qs = [" ".join(rng.sample(w, 3)) for w in words if len(w) >= 3]
    return db_name, {"org": org, "size": size}, readers, qs[: queries + 1], ("memory", "episode")


def search(args) -> dict:
    from app.kit.database.db import bind_principal, make_sessionmaker
    from app.kit.database.pg import app_url
    from app.search.repository import bm25, bm25_stats
    from app.search.schemas import SearchFilters

    if args.scale:
        db_name, world, readers, queries, types_ = _scale_org(args.scale, args.queries)
    else:
        db_name, world, readers, queries, types_ = _text_org(args.queries) if args.text_org else _growth_org()
    settings = database_settings(db_name)
    eng = create_engine(app_url(settings))
    sessions = make_sessionmaker(eng)
    sent: list = []
    event.listen(eng, "before_cursor_execute", lambda c, cur, stmt, params, ctx, many: sent.append((stmt, params)))
    arms = {"against": _against(args.against).top_scored, "postings": bm25_stats.top_scored}
    print(f"{world['size']} items, load {load_average()}, top {args.n}, against {args.against}", flush=True)
    out: dict = {"readers": {}, "postings": _postings_count(settings, world["org"])}
    print("postings", out["postings"], flush=True)
    for name, p in readers.items():
        if args.reader and args.reader != name:
            continue
        ms: dict = {a: [] for a in arms}
        same, calls, calls_seen = 0, 0, []
        for qi, words in enumerate(queries[: args.queries + 1]):
            for type_ in types_:
                with sessions() as db:
                    bind_principal(db, p)
                    lexemes = bm25.query_lexemes(db, words)
                    big_n, dfs = bm25_stats.caller_stats(db, p, type_, lexemes)
                    quoted = {w: bm25_stats.tsquery_text(w) for w in lexemes}
                    got = {}
                    order = list(arms) if (qi + (type_ == "episode")) % 2 else list(arms)[::-1]
                    for a in order:
                        t0 = time.perf_counter()
                        got[a] = arms[a](db, p, type_, SearchFilters(), quoted=quoted, n=args.n, big_n=big_n, dfs=dfs)
                        took = (time.perf_counter() - t0) * 1000
                        if qi:
                            ms[a].append(took)
                        if qi and a == "against":
                            calls_seen.append((took, (words, type_, lexemes, big_n, dfs)))
                    db.rollback()
                if qi:
                    calls += 1
                    same += got["against"] == got["postings"]
        row = {a: {"p50": _pct(v, 0.5), "p95": _pct(v, 0.95), "mean": round(statistics.mean(v), 1)} for a, v in ms.items()}
        row["identical_top_n"] = f"{same}/{calls}"
        out["readers"][name] = row
        print(name, row, flush=True)
        calls_seen.sort(key=lambda c: c[0])
        if args.explain and calls_seen:
            _explain(sessions, sent, p, arms, calls_seen[-1][1], args.n, "heaviest")
        if args.explain_median and calls_seen:
            _explain(sessions, sent, p, arms, calls_seen[len(calls_seen) // 2][1], args.n, "median")
    out["load_after"] = load_average()
    return out


def _explain(sessions, sent, p, arms, call, n, which: str) -> None:
    from app.kit.database.db import bind_principal
    from app.search.repository.bm25_stats import tsquery_text
    from app.search.schemas import SearchFilters

    words, type_, lexemes, big_n, dfs = call
    print(f"  {which}: {type_} {words!r} N={big_n} df={dfs}", flush=True)
    quoted = {w: tsquery_text(w) for w in lexemes}
    for a, fn in arms.items():
        with sessions() as db:
            bind_principal(db, p)
            sent.clear()
            fn(db, p, type_, SearchFilters(), quoted=quoted, n=n, big_n=big_n, dfs=dfs)
            stmts = list(sent)
            for stmt, params in stmts:
                for _ in range(2):
                    plan = db.connection().exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + stmt, params).scalars().all()
                print(f"  [{a}]\n    " + "\n    ".join(plan), flush=True)
            db.rollback()


def _postings_count(settings, org: str) -> dict:
    """The org's postings, and the lexemes of its counted shared rows: the owner's copies among them."""
    s = _migration().S
    eng = create_engine(settings.database_url)
    with eng.connect() as c:
        posted = c.execute(text("SELECT count(*) FROM bm25_postings WHERE org_id = :o"), {"o": org}).scalar_one()
        extra = 0
        for table, served in s.TYPES.values():
            extra += c.execute(
                text(
                    f"SELECT coalesce(sum(length(tsv)), 0) FROM {table} WHERE org_id = :o AND branch_id IS NULL "
                    f"AND {served} AND visibility <> 'private'"
                ),
                {"o": org},
            ).scalar_one()
    eng.dispose()
    return {"postings": posted, "owner_copies": int(extra), "copies_share": round(extra / max(posted, 1), 3)}


def ingest(args) -> dict:
    """Database-only insert rate: 500-row episode INSERTs into another org, the trigger functions
    of 0034, 0033 and 0024 and none, alternating; 0034's are put back at the end."""
    from sqlalchemy.orm import Session

    from app.orgs import service as orgs
    from bench.speed.bm25_buckets import INSERT, _rows

    mig = _migration()
    served = mig.S.TYPES["episode"][1]
    fns = {
        "0034": _migration(INSERT_MIGRATION)._function("episode", served),
        "0033": mig._function("episode", served),
        "0024": mig.S._function("episode", served),
    }
    fns = {k: v.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1) for k, v in fns.items()}
    settings = database_settings(DB)
    admin = create_engine(settings.database_url)
    with Session(admin, expire_on_commit=False) as db:
        side = orgs.create_org(db, f"ingest-{uuid.uuid4().hex[:6]}")
        writer = orgs.create_user(db, side, "w").id
        db.commit()
    rng = random.Random(5)
    load_before = load_average()
    times: dict = {"0034": [], "0033": [], "0024": [], "none": []}
    with admin.connect() as c:
        for r in range(args.ingest):
            arms = list(times) if r % 2 else list(times)[::-1]
            for arm in arms:
                rows = _rows(rng, [writer], 500)
                if arm == "none":
                    c.execute(text("ALTER TABLE episodes DISABLE TRIGGER bm25_keep_ins"))
                else:
                    c.execute(text(fns[arm]))
                c.commit()
                t0 = time.perf_counter()
                c.execute(text(INSERT), {"o": side.id, "rows": rows})
                c.commit()
                times[arm].append(time.perf_counter() - t0)
                if arm == "none":
                    c.execute(text("ALTER TABLE episodes ENABLE TRIGGER bm25_keep_ins"))
                    c.commit()
        c.execute(text(fns["0034"]))
        c.execute(text("DELETE FROM episodes WHERE org_id = :o"), {"o": side.id})
        c.commit()
    rate = {arm: round(500 * len(ts) / sum(ts), 1) for arm, ts in times.items()}
    out = {
        "rows_per_s": rate,
        "0034_vs_0033": round(rate["0034"] / rate["0033"], 3),
        "0034_vs_0024": round(rate["0034"] / rate["0024"], 3),
        "0033_vs_0024": round(rate["0033"] / rate["0024"], 3),
        "load": f"{load_before} -> {load_average()}",
    }
    print("ingest (500-row INSERTs, DB only)", out, flush=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--n", type=int, default=100, help="top n")
    ap.add_argument("--against", default="6a25bf8^", help="the commit whose bm25_stats.top_scored is the other arm")
    ap.add_argument("--explain", action="store_true", help="EXPLAIN (ANALYZE, BUFFERS) each reader's heaviest call")
    ap.add_argument("--explain-median", action="store_true", help="the same for each reader's median call")
    ap.add_argument("--text-org", action="store_true", help="bench.speed.bm25_buckets' org instead (run it first)")
    ap.add_argument("--scale", metavar="DB", default=None, help="bench/speed/scale's largest org in DB instead")
    ap.add_argument("--reader", default=None, help="only this reader (its name as printed)")
    ap.add_argument("--ingest", type=int, default=0, help="rounds of the database-only write A/B (0: the search A/B)")
    args = ap.parse_args(argv)
    return ingest(args) if args.ingest else search(args)


if __name__ == "__main__":
    main()
