"""bench.speed.service's single-org database in both layouts, interleaved query by query: the same rows
in one table per type (revision 0014) and hash-partitioned by org (0015), so that the partitioning
migration's cost at 100k items in one org is measured under the same machine load (the target: the
100k bench.speed.service latencies no more than 10 % slower).

    python -m bench.speed.service --n 100000 --queries 100          # builds memscale_bench (any revision)
    nice -n 10 .venv/bin/python -m bench.tools.scale_layouts --from memscale_bench

`--from DB` copies DB twice (CREATE DATABASE ... TEMPLATE) and migrates one copy to 0014 and the
other to head, timing the migration step that moves the rows (0015's upgrade or its downgrade);
`--dbs A,B` measures two databases prepared earlier instead. Per query and database (the order
alternating): the four server-side searches bench.speed.service times (hybrid one type, vector, text,
hybrid over all three types; the service's `rank`, query embedding excluded) and hybrid over all
types over HTTP (uvicorn on loopback, one server per database), for bench.speed.service's reader u0;
then rounds of 500 episodes inserted as the service role (RLS, every index), rolled back; then
the statements of `--explain` hybrid searches under EXPLAIN ANALYZE (planning vs execution ms).
"""

from __future__ import annotations

import random
import time

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from bench.command import parser, save
from bench.common import database_settings, load_average, serve_in_thread, summary_ms

SEARCHES = (
    ("hybrid", "hybrid", ["episode"]),
    ("vector", "vector", ["episode"]),
    ("text", "text", ["episode"]),
    ("hybrid_all_types", "hybrid", ["memory", "episode", "chunk"]),
)


def copies(source: str) -> tuple[list[str], dict]:
    """Two copies of `source`: `<source>_global` at 0014 and `<source>_hash` at head, timed. The
    source's sessions are ended first (a template database must have none)."""
    from app.kit.database.migrate import downgrade, upgrade
    from app.kit.database.pg import admin_url
    from bench.speed.scale.layout import GLOBAL_REVISION, keep_key_principal

    server = create_engine(make_url(admin_url(database_settings(source))).set(database="postgres"), isolation_level="AUTOCOMMIT")
    out: dict = {}
    names = [f"{source}_global", f"{source}_hash"]
    with server.connect() as c:
        # A template must have no other session: end the idle ones a bench left in this process.
        c.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d AND pid <> pg_backend_pid()"),
            {"d": source},
        )
        for name in names:
            c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            t0 = time.perf_counter()
            c.execute(text(f"CREATE DATABASE {name} TEMPLATE {source}"))
            out[f"copy_{name}_s"] = round(time.perf_counter() - t0, 1)
    server.dispose()
    for name, target in zip(names, (GLOBAL_REVISION, "head")):
        s = database_settings(name)
        eng = create_engine(s.database_url)
        with eng.connect() as c:
            start = c.execute(text("SELECT version_num FROM alembic_version")).scalar()
        t0 = time.perf_counter()
        # Both copies pass the same revisions except 0015, which moves the rows one way or the other.
        (upgrade if target == "head" or start < GLOBAL_REVISION else downgrade)(s, target)
        if target == GLOBAL_REVISION:
            keep_key_principal(s)
        out[f"migrate_{name}"] = {"from": start, "to": target, "s": round(time.perf_counter() - t0, 1)}
        with eng.connect() as c:
            c.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE episodes"))
        eng.dispose()
    return names, out


def _explained(env: dict, q: str, v, f0, rank, bind_principal) -> tuple[float, float, int]:
    """Planning and execution ms summed over the item-table statements of one hybrid search."""
    import re

    from sqlalchemy import event

    from app.search.service import RankCall

    seen: list = []

    def capture(conn, cursor, statement, params, context, executemany):
        if re.search(r"\b(episodes|memories)\b", statement) and not statement.startswith("EXPLAIN"):
            seen.append((statement, params))

    plan = execute = 0.0
    with env["app"].state.sessions() as db:
        bind_principal(db, env["p"])
        conn = db.connection()
        event.listen(conn, "before_cursor_execute", capture)
        try:
            rank(
                db,
                RankCall(
                    principal=env["p"],
                    query=q,
                    qvec=v,
                    types=["memory", "episode", "chunk"],
                    k=10,
                    mode="hybrid",
                    filters=f0,
                    ef_search=env["settings"].hnsw_ef_search,
                ),
            )
        finally:
            event.remove(conn, "before_cursor_execute", capture)
        for statement, params in seen:
            out = "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN (ANALYZE, SUMMARY, TIMING OFF) " + statement, params))
            plan += float(re.search(r"Planning Time: ([\d.]+)", out).group(1))
            execute += float(re.search(r"Execution Time: ([\d.]+)", out).group(1))
        db.rollback()
    return plan, execute, len(seen)


def run(args) -> dict:
    from app.kit.database.db import bind_principal
    from app.kit.runtime.embedding import LocalEmbedder
    from app.main import create_app
    from app.search.schemas import SearchFilters
    from app.search.service import RankCall, rank
    from bench.speed.scale.layout import describe
    from bench.speed.scale.measure import reader
    from bench.speed.service.data import query

    res: dict = {"load_average": {"start": load_average()}}
    if args.source:
        dbs, res["prepare"] = copies(args.source)
    else:
        dbs = args.dbs.split(",")
    embedder = LocalEmbedder()
    envs: dict = {}
    for name in dbs:
        s = database_settings(name).model_copy(update={"log_level": "WARNING"})
        admin = create_engine(s.database_url)
        p, key = reader(admin, s, args.org, args.user)
        with admin.connect() as c:
            rows = c.execute(text("SELECT count(*) FROM episodes WHERE org_id = :o"), {"o": p.org_id}).scalar()
        app = create_app(s, embedder=embedder)
        envs[name] = {
            "settings": s,
            "p": p,
            "app": app,
            "rows": rows,
            "layout": describe(s),
            "http": httpx.Client(base_url=serve_in_thread(app), timeout=120),
            "h": {"Authorization": f"Bearer {key}"},
        }
        admin.dispose()
    rng = random.Random(args.seed)
    qtexts = [query(rng) for _ in range(args.queries + 1)]
    qvecs = embedder.embed_queries(qtexts)
    f0 = SearchFilters()
    lat: dict = {name: {} for name in dbs}
    res["load_average"]["before_queries"] = load_average()
    for i, (q, v) in enumerate(zip(qtexts, qvecs)):
        for name in dbs if i % 2 == 0 else dbs[::-1]:  # neither layout always runs first
            env = envs[name]
            times = {}
            for label, mode, types in SEARCHES:
                with env["app"].state.sessions() as db:
                    bind_principal(db, env["p"])
                    t0 = time.perf_counter()
                    rank(
                        db,
                        RankCall(
                            principal=env["p"],
                            query=q,
                            qvec=v,
                            types=types,
                            k=10,
                            mode=mode,
                            filters=f0,
                            ef_search=env["settings"].hnsw_ef_search,
                        ),
                    )
                    times[label] = time.perf_counter() - t0
                    db.rollback()
            t0 = time.perf_counter()
            env["http"].post("/v1/search", json={"query": q, "k": 10}, headers=env["h"]).raise_for_status()
            times["http_hybrid_all_types"] = time.perf_counter() - t0
            if i:  # the first query warms both up
                for label, dt in times.items():
                    lat[name].setdefault(label, []).append(dt)
    # Writes: batches of episodes inserted as the service role under RLS (tuple routing and the
    # parent's WITH CHECK on the partitioned side), every index maintained, then rolled back so
    # the databases stay as built; vectors are the queries' (no model in the loop).
    ins = text(
        "INSERT INTO episodes (org_id, owner_id, kind, content, visibility, embedding) "
        "SELECT :o, :u, 'note', 'written by the layout bench ' || g, 'private', CAST(:v AS vector) "
        "FROM generate_series(1, :n) g"
    )
    for i in range(args.write_rounds + 1):
        for name in dbs if i % 2 == 0 else dbs[::-1]:
            env = envs[name]
            with env["app"].state.sessions() as db:
                bind_principal(db, env["p"])
                t0 = time.perf_counter()
                for j in range(args.write_batch // 50):
                    db.execute(
                        ins,
                        {
                            "o": env["p"].org_id,
                            "u": env["p"].user_id,
                            "n": 50,
                            "v": str(list(map(float, qvecs[(i + j) % len(qvecs)]))),
                        },
                    )
                dt = time.perf_counter() - t0
                db.rollback()
            if i:
                lat[name].setdefault(f"insert_{args.write_batch}_episodes", []).append(dt)
    # Where a difference comes from: every statement one hybrid all-types search sends to episodes
    # or memories, run again under EXPLAIN ANALYZE with its own parameters; planning and execution
    # time summed per search (partition pruning is planning work).
    for i, (q, v) in enumerate(zip(qtexts[: args.explain + 1], qvecs)):
        for name in dbs if i % 2 == 0 else dbs[::-1]:
            env = envs[name]
            plan, execute, n = _explained(env, q, v, f0, rank, bind_principal)
            if i:
                lat[name].setdefault("explain_planning", []).append(plan / 1000)
                lat[name].setdefault("explain_execution", []).append(execute / 1000)
                res.setdefault("explain_statements", n)
    res["load_average"]["end"] = load_average()
    res["dbs"] = {
        name: {"layout": envs[name]["layout"], "org_rows": envs[name]["rows"], **{k: summary_ms(v) for k, v in lat[name].items()}}
        for name in dbs
    }
    a, b = dbs
    res["ratio_second_over_first"] = {
        k: {
            "p50": round(res["dbs"][b][k]["p50_ms"] / res["dbs"][a][k]["p50_ms"], 3),
            "p95": round(res["dbs"][b][k]["p95_ms"] / res["dbs"][a][k]["p95_ms"], 3),
        }
        for k in lat[a]
    }
    res["queries"] = args.queries
    for env in envs.values():
        env["http"].close()
    return res


def _cell(latencies: dict, search: str) -> str:
    """One table cell: p50 / p95 / p99 of `search` in one database's latencies."""
    ms = latencies[search]
    return f"{ms['p50_ms']} / {ms['p95_ms']} / {ms['p99_ms']}"


def markdown(res: dict) -> str:
    a, b = res["dbs"]
    lines = [
        f"# bench/speed/scale.service_layouts: {a} vs {b}, interleaved, {res['queries']} queries (p50 / p95 / p99 ms)",
        "",
        f"Load average {res['load_average']}. Layouts: "
        + "; ".join(f"{n}: {d['layout']}, {d['org_rows']:,} episodes in the org" for n, d in res["dbs"].items()),
        "",
    ]
    if "prepare" in res:
        lines += [f"Prepared: {res['prepare']}", ""]
    lines += [f"| search | {a} | {b} | ratio p50 / p95 |", "|---|---|---|---|"]
    for k, r in res["ratio_second_over_first"].items():
        lines.append(f"| {k} | {_cell(res['dbs'][a], k)} | {_cell(res['dbs'][b], k)} | {r['p50']} / {r['p95']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "service_layouts")
    ap.add_argument("--from", dest="source", default=None, help="copy this database into a global and a hash copy first")
    ap.add_argument("--dbs", default="memscale_bench_global,memscale_bench_hash")
    ap.add_argument("--org", default="bench")
    ap.add_argument("--user", default="u0")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--write-rounds", type=int, default=20, help="rounds of inserts per database (rolled back)")
    ap.add_argument("--explain", type=int, default=20, help="searches explained per database (planning vs execution)")
    ap.add_argument("--write-batch", type=int, default=500, help="episodes per round, in statements of 50")
    args = ap.parse_args(argv)
    res = run(args)
    return save(args.out, res, markdown(res))


if __name__ == "__main__":
    main()
