"""Where one ranking's time goes at a grown org: every statement the service sends, timed and
attributed to the repository function that sent it (its stage), then each one re-run under
`EXPLAIN (ANALYZE, BUFFERS)` with the same parameters and the same row-level-security settings.

    .venv/bin/python -m bench.speed.growth.stages --build 100000   # grow the org once (kept)
    .venv/bin/python -m bench.speed.growth.stages [--queries 10] [--explain]
    .venv/bin/python -m bench.speed.growth.stages --ab-second-round --queries 30
    .venv/bin/python -m bench.speed.growth.stages --scale memscale_bench_scale_hash --queries 20 --explain
    .venv/bin/python -m bench.speed.growth.stages --scale DB --against DB2 --exact --queries 20

The org is the growth bench's (bench/speed/growth/synth.py), kept in the database
`memscale_bench_growth_stages` between runs; the reader is the growth bench's reader in one group.
Prints, per arm (hybrid one type k = 10, context retrieval), the mean ms and calls per stage.
`--scale DB` measures bench/speed/scale's largest org (`--org`, reader `--reader`) in database DB
instead, with that bench's queries and its arm (hybrid, all types, k = 10); each stage is named
with the item type whose stage sent it, and `--explain` replays every query's statements.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from sqlalchemy import event

from bench.common import database_settings, fresh_database, load_average

DB = "memscale_bench_growth_stages"
WORLD = Path(".memscale") / "growth_stages_world.json"


class _OnePass:
    """`bm25_stats` with the kept statistics declared unusable: the text stage takes the one-pass statement."""

    def __getattr__(self, name):
        from app.search.repository import bm25_stats

        return getattr(bm25_stats, name)

    @staticmethod
    def served_by_stats(*a):
        return False


def _build(size: int) -> None:
    from bench.speed.growth.__main__ import _grow, _setup

    settings = fresh_database(DB)
    world = _setup(settings)
    took = _grow(settings, world, 0, size)
    world["readers"] = {k: [str(v[0]), list(v[1])] for k, v in world["readers"].items()}
    WORLD.parent.mkdir(exist_ok=True)
    WORLD.write_text(
        json.dumps({"org": str(world["org"]), "readers": world["readers"], "queries": world["queries"], "size": size})
    )
    print(f"{size} items grown in {took:.0f} s", flush=True)


def _stage_of() -> str:
    """The repository function (or service function) that sent the statement being executed,
    with the item type of the ranking stage (`service._fuse`) it ran in when there is one. Walks
    the frames themselves (`inspect.stack` reads source lines: tens of ms of the GIL per
    statement, which the ranking's other threads would wait for)."""
    stage, type_ = "other", ""
    fr = sys._getframe(2)
    for _ in range(60):
        if fr is None:
            break
        mod, fn = fr.f_globals.get("__name__", ""), fr.f_code.co_name
        if stage == "other" and mod.startswith("app.search.repository.") and not mod.endswith(".filters"):
            stage = f"{mod.rsplit('.', 1)[1]}.{fn}"
        elif stage == "other" and mod.startswith(("app.feedback", "app.context")):
            stage = f"{mod.split('.')[1]}.{fn}"
        if mod == "app.search.service" and fn == "_fuse":
            type_ = f"{fr.f_locals.get('t')} "
            break
        fr = fr.f_back
    return type_ + stage


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=int, help="grow a fresh org to this many items first")
    ap.add_argument("--queries", type=int, default=10)
    ap.add_argument("--explain", action="store_true", help="EXPLAIN (ANALYZE, BUFFERS) the first query's statements")
    ap.add_argument(
        "--ab-second-round",
        action="store_true",
        help="context retrieval with its second round from the kept statistics vs the one pass, interleaved",
    )
    ap.add_argument("--scale", metavar="DB", help="bench/speed/scale's database: its largest org, all types")
    ap.add_argument("--org", default="scale-0000", help="with --scale: the org's name")
    ap.add_argument("--reader", default="u0", help="with --scale: the reader's user name")
    ap.add_argument("--against", metavar="DB2", help="with --scale: the same arm on DB2 too, interleaved")
    ap.add_argument("--exact", action="store_true", help="with --scale: the exact text statement as one more arm")
    ap.add_argument("--save", default="scale_stages_results.json", help="with --scale: each query's results, in the data dir")
    args = ap.parse_args(argv)
    if args.scale:
        return _scale(args)
    if args.build:
        _build(args.build)
    from app.auth.principal import Principal
    from app.context.service import candidates, retrieved_pieces
    from app.kit.database.db import bind_principal
    from app.search.service import RankCall, rank

    world = json.loads(WORLD.read_text())
    uid, groups = world["readers"]["1 group"]
    p = Principal(org_id=world["org"], user_id=uid, name="r", roles=("member",), groups=tuple(groups), clearances=())
    eng, sessions, sent = _instrumented(DB)

    arms = {
        "one type": lambda db, words, q: rank(db, RankCall(principal=p, query=words, qvec=q, k=10, types=("memory",))),
        "context": lambda db, words, q: retrieved_pieces(
            db, RankCall(principal=p, query=words, qvec=q, k=candidates(2000), second_round=True)
        ),
    }
    print(f"{world['size']} items, load {load_average()}")
    if args.ab_second_round:
        return _ab_second_round(sessions, p, world, args.queries, arms["context"])
    for name, fn in arms.items():
        per: dict = defaultdict(list)
        sent_n: dict = defaultdict(int)
        totals = []
        for i, (words, vec) in enumerate(world["queries"][: args.queries]):
            with sessions() as db:
                bind_principal(db, p)
                sent.clear()
                t0 = time.perf_counter()
                fn(db, words, np.array(vec, dtype=np.float32))
                totals.append((time.perf_counter() - t0) * 1000)
                got = list(sent)
                db.rollback()
            by: dict = defaultdict(float)
            for stage, ms, *_ in got:
                by[stage] += ms
                sent_n[stage] += 1
            for stage, ms in by.items():
                per[stage].append(ms)
            if args.explain and i < 2:
                print(f"  {name}, query {i}: the statements as sent, then under EXPLAIN")
                _explain(sessions, p, got, Path(".memscale") / "growth_stages_plans.txt")
        print(f"\n{name}: total {statistics.mean(totals):.1f} ms mean, {statistics.median(totals):.1f} p50")
        for stage, v in sorted(per.items(), key=lambda kv: -sum(kv[1])):
            print(f"  {stage:40s} {sum(v) / len(totals):7.1f} ms, {sent_n[stage] / len(totals):4.1f} statements a ranking")
    eng.dispose()


def _instrumented(db_name: str):
    """The service's engine on `db_name`, its sessionmaker and the list every statement sent
    lands in: (stage, ms as sent, statement, parameters)."""
    from app.kit.database.db import make_engine, make_sessionmaker
    from app.kit.database.pg import app_url

    eng = make_engine(app_url(database_settings(db_name)), pool_size=4)
    sent: list = []

    @event.listens_for(eng, "before_cursor_execute")
    def _before(conn, cursor, statement, params, context, executemany):
        conn.info["t0"] = time.perf_counter()
        conn.info["stage"] = _stage_of()

    @event.listens_for(eng, "after_cursor_execute")
    def _after(conn, cursor, statement, params, context, executemany):
        sent.append((conn.info["stage"], (time.perf_counter() - conn.info["t0"]) * 1000, statement, params))

    return eng, make_sessionmaker(eng), sent


def _pcts(v: list[float]) -> str:
    v = sorted(v)
    return f"{statistics.mean(v):7.1f} {v[len(v) // 2]:7.1f} {v[int(0.95 * (len(v) - 1))]:7.1f}"


def _scale(args) -> None:
    """bench/speed/scale's arm on its database: per stage, mean / p50 / p95 ms per ranking as
    sent, and with `--explain` the same of the server's planning + execution time on the replay.
    `--against DB2` (a copy of the database, changed) and `--exact` (the same database, text
    stage on the exact one-pass statement) are further arms, run in turn per query (interleaved),
    their results compared with the first arm's (types, ids, order, scores)."""
    from sqlalchemy import create_engine

    from app.kit.database.pg import admin_url
    from app.kit.runtime.embedding import LocalEmbedder
    from bench.speed.scale import measure

    settings = database_settings(args.scale)
    admin = create_engine(admin_url(settings))
    p, _key = measure.reader(admin, settings, args.org, args.reader)
    admin.dispose()
    qtexts = measure.queries(args.queries)
    qvecs = LocalEmbedder().embed_queries(qtexts)
    arms = {args.scale: (*_instrumented(args.scale), False)}
    if args.against:
        arms[args.against] = (*_instrumented(args.against), False)
    if args.exact:
        arms[f"{args.scale} exact text"] = (*_instrumented(args.scale), True)
    got: dict = {name: _Arm(len(qtexts)) for name in arms}
    print(f"{args.scale} {args.org} {args.reader}: load {load_average()}")
    for i, (q, v) in enumerate([(qtexts[-1], qvecs[-1]), *zip(qtexts, qvecs)]):  # the first one warms up
        order = list(arms) if i % 2 else list(reversed(arms))
        for name in order:
            eng, sessions, sent, exact = arms[name]
            dt, out, statements = _rank_all_types(sessions, sent, p, q, v, settings.hnsw_ef_search, exact=exact)
            if i:
                got[name].add(i - 1, dt, out, statements)
                if args.explain:
                    plans = Path(settings.data_dir) / "scale_stages_plans.txt"
                    for stage, ms in _explain(sessions, p, statements, plans, echo=False).items():
                        got[name].server[stage][i - 1] += ms
    first = got[args.scale].results
    for name, arm in got.items():
        same = sum(a == b for a, b in zip(arm.results, first))
        print(
            f"\n{name}: whole ranking mean / p50 / p95 {_pcts(arm.totals)} ms; same results as the first arm: {same}/{len(first)}"
        )
        print(f"  {'stage':44s} {'n':>4s} | as sent mean p50 p95      | server mean p50 p95")
        for stage, v in sorted(arm.sent.items(), key=lambda kv: -sum(kv[1])):
            server = _pcts(arm.server[stage]) if stage in arm.server else ""
            print(f"  {stage:44s} {arm.n[stage] / len(arm.totals):4.1f} | {_pcts(v)} | {server}")
    print(f"load {load_average()}")
    (Path(settings.data_dir) / args.save).write_text(json.dumps({name: arm.results for name, arm in got.items()}))
    for eng, *_ in arms.values():
        eng.dispose()


class _Arm:
    """One arm's figures: per query the whole ranking's ms and its results; per stage the ms
    as sent and (replayed) on the server, and how many statements."""

    def __init__(self, n: int):
        self.totals: list = []
        self.results: list = []
        self.sent: dict = defaultdict(lambda: [0.0] * n)
        self.server: dict = defaultdict(lambda: [0.0] * n)
        self.n: dict = defaultdict(int)

    def add(self, i: int, dt: float, out: list, statements: list) -> None:
        self.totals.append(dt)
        self.results.append([(r.type, str(r.id), r.score) for r in out])
        for stage, ms, *_ in statements:
            self.sent[stage][i] += ms
            self.n[stage] += 1


def _rank_all_types(sessions, sent: list, p, q: str, v, ef_search: int, *, exact: bool) -> tuple[float, list, list]:
    """One hybrid ranking over all types (bench/speed/scale's): its ms, results and statements.
    `exact`: the text stage on the one-pass statement (the kept statistics declared unusable)."""
    from app.kit.database.db import bind_principal
    from app.search.repository import bm25, bm25_stats
    from app.search.schemas import SearchFilters
    from app.search.service import RankCall, rank

    bm25.bm25_stats = _OnePass() if exact else bm25_stats
    try:
        with sessions() as db:
            bind_principal(db, p)
            sent.clear()
            t0 = time.perf_counter()
            call = RankCall(
                principal=p,
                query=q,
                qvec=v,
                types=("memory", "episode", "chunk"),
                k=10,
                filters=SearchFilters(),
                ef_search=ef_search,
            )
            out, _ = rank(db, call)
            dt = (time.perf_counter() - t0) * 1000
            statements = list(sent)
            db.rollback()
    finally:
        bm25.bm25_stats = bm25_stats
    return dt, out, statements


def _ab_second_round(sessions, p, world: dict, n_queries: int, context) -> None:
    """Context retrieval, its second round on the kept path vs the one-pass statement (the
    statistics declared unusable for it), alternating per query."""
    from app.kit.database.db import bind_principal
    from app.search.repository import bm25_stats, expansion

    lat: dict = {"kept": [], "one pass": []}
    for i, (words, vec) in enumerate(world["queries"][:n_queries]):
        for arm in ("kept", "one pass") if i % 2 else ("one pass", "kept"):
            expansion.bm25_stats = bm25_stats if arm == "kept" else _OnePass()
            with sessions() as db:
                bind_principal(db, p)
                t0 = time.perf_counter()
                context(db, words, np.array(vec, dtype=np.float32))
                lat[arm].append((time.perf_counter() - t0) * 1000)
                db.rollback()
    expansion.bm25_stats = bm25_stats
    for arm, v in lat.items():
        v = sorted(v)
        print(f"context retrieval, second round {arm}: p50 {v[len(v) // 2]:.1f} ms, p95 {v[int(0.95 * (len(v) - 1))]:.1f} ms")
    print(f"load {load_average()}")


def _explain(sessions, p, got: list, out: Path, *, echo: bool = True) -> dict:
    """Re-run one ranking's statements in order in one session bound like the ranking's (its
    `SET LOCAL`s replayed), each read under EXPLAIN (ANALYZE, BUFFERS); full plans to `out`, one
    line per statement printed (`echo`): the stage, its time as sent, the server's planning and
    execution. Returns the server's planning + execution ms per stage."""
    from app.kit.database.db import bind_principal

    server: dict = defaultdict(float)

    with sessions() as db, out.open("a") as fh:
        bind_principal(db, p)
        cur = db.connection().connection.cursor()
        for stage, ms, statement, params in got:
            head = statement.lstrip().upper()
            if head.startswith("SET") or "SET_CONFIG" in head:  # the walk's settings (vector._set_local) too
                cur.execute(statement, params)
                continue
            if not head.startswith(("SELECT", "WITH")):
                continue
            cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params)
            plan = [r[0] for r in cur.fetchall()]
            fh.write(f"\n--- {stage} ({ms:.1f} ms as sent)\n" + "\n".join(plan) + "\n")
            times = [x.strip() for x in plan if x.startswith(("Planning Time", "Execution Time"))]
            server[stage] += sum(float(x.split(":")[1].split()[0]) for x in times)
            if echo:
                print(f"    {stage:32s} sent {ms:6.1f} ms | {' | '.join(times)} | {plan[0][:70]}")
        db.rollback()
    return server


if __name__ == "__main__":
    main()
