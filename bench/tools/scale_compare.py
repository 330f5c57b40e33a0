"""Two layouts side by side, interleaved query by query, on databases that `python -m bench.speed.scale`
built and left in place (the same seeded data in each): server-side hybrid search (all types)
and the service's vector search (k = 100, the hybrid pool) for the measured reader of each org
class, so that both layouts see the same machine load. With `--exact-below A,B` it compares one
database under two settings of hybrid's exact-pool bound instead (app.search.service.Tuning;
0 = the HNSW walk always).

    nice -n 15 .venv/bin/python -m bench.tools.scale_compare [--dbs memscale_bench_scale,memscale_bench_scale_hash]
    nice -n 15 .venv/bin/python -m bench.tools.scale_compare --dbs memscale_bench_scale --exact-below 0,10000
"""

from __future__ import annotations

import argparse
import time

from sqlalchemy import create_engine

from bench.common import RESULTS, database_settings, report, summary_ms

CLASSES = {"largest": "scale-0000", "2 %": "scale-0001"}


def _small_org(admin) -> str:
    """The median small org, as the bench chose it (orgs 11.. by item count)."""
    import numpy as np

    from bench.speed.scale.data import org_sizes

    with admin.connect() as c:
        n_orgs = c.exec_driver_sql("SELECT count(*) FROM orgs WHERE name LIKE 'scale-%%'").scalar()
        n_items = c.exec_driver_sql("SELECT (SELECT count(*) FROM episodes) + (SELECT count(*) FROM memories)").scalar()
    sizes = org_sizes(round(n_items, -4), n_orgs)
    return f"scale-{11 + int(np.argsort(sizes[11:])[len(sizes[11:]) // 2]):04d}"


def run(args) -> dict:
    from dataclasses import replace

    from sqlalchemy.orm import Session

    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal, make_engine, make_sessionmaker
    from app.kit.database.pg import admin_url, app_url
    from app.kit.runtime.embedding import LocalEmbedder
    from app.orgs import service as orgs
    from app.search import repository as repo
    from app.search.schemas import SearchFilters
    from app.search.service import RankCall, rank
    from app.search.tuning import DEFAULT_TUNING
    from bench.speed.scale.layout import upgrade_keeping_layout
    from bench.speed.scale.measure import queries

    bounds = [int(x) for x in args.exact_below.split(",")] if args.exact_below else [None]
    arms = [(db, b) for db in args.dbs.split(",") for b in bounds]
    dbs = [db if b is None else f"{db}@exact_below={b}" for db, b in arms]
    envs = {}
    for label, (name, bound) in zip(dbs, arms):
        s = database_settings(name)
        upgrade_keeping_layout(s)  # built before a later migration (reads name its columns); global stays global
        admin = create_engine(admin_url(s))
        envs[label] = {
            "settings": s,
            "admin": admin,
            "bound": bound,
            "sessions": make_sessionmaker(make_engine(app_url(s), pool_size=2)),
        }
    classes = {**CLASSES, "small (median)": _small_org(envs[dbs[0]]["admin"])}
    qtexts = queries(args.queries)
    qvecs = LocalEmbedder().embed_queries(qtexts)
    f0 = SearchFilters()
    out: dict = {"dbs": dbs, "queries": len(qtexts), "classes": {}}
    for label, org_name in classes.items():
        lat: dict = {}
        for _name, env in envs.items():
            with Session(env["admin"]) as db:
                u = orgs.user_by_name(db, orgs.org_by_name(db, org_name), "u0")
                env["p"] = Principal(
                    org_id=u.org_id,
                    user_id=u.id,
                    name="u0",
                    roles=tuple(u.roles),
                    groups=tuple(u.groups),
                    clearances=tuple(u.clearances),
                )
        for i, (q, v) in enumerate(zip(qtexts, qvecs)):
            order = dbs if i % 2 == 0 else dbs[::-1]  # neither layout always runs first
            for name in order:
                env = envs[name]
                tuning = replace(DEFAULT_TUNING, **({} if env["bound"] is None else {"exact_below": env["bound"]}))
                with env["sessions"]() as db:
                    bind_principal(db, env["p"])
                    t0 = time.perf_counter()
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
                            tuning=tuning,
                        ),
                    )
                    t1 = time.perf_counter()
                    for t in ("memory", "episode"):
                        repo.text_ids(db, env["p"], t, q, f0, 100)
                    t2 = time.perf_counter()
                    for t in ("memory", "episode"):
                        repo.vector_ids(db, env["p"], t, v, f0, 100, ef_search=env["settings"].hnsw_ef_search)
                    t3 = time.perf_counter()
                    db.rollback()
                if i:  # the first query warms both up
                    for part, dt in (("hybrid", t1 - t0), ("text_mem+ep", t2 - t1), ("vector100_mem+ep", t3 - t2)):
                        lat.setdefault(name, {}).setdefault(part, []).append(dt)
        out["classes"][label] = {name: {k: summary_ms(v) for k, v in parts.items()} for name, parts in lat.items()}
        print(label, out["classes"][label], flush=True)
    for env in envs.values():
        env["admin"].dispose()
    return out


def markdown(res: dict) -> str:
    lines = [
        f"# bench.tools.scale_compare: {', '.join(res['dbs'])}, interleaved, {res['queries']} queries "
        "(server-side, p50 / p95 ms)",
        "",
        "| org | database | hybrid (all types) | BM25 text, mem + ep | vector k=100, mem + ep |",
        "|---|---|---|---|---|",
    ]
    for label, per_db in res["classes"].items():
        for name, parts in per_db.items():
            cells = [f"{parts[k]['p50_ms']} / {parts[k]['p95_ms']}" for k in ("hybrid", "text_mem+ep", "vector100_mem+ep")]
            lines.append(f"| {label} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dbs", default="memscale_bench_scale,memscale_bench_scale_hash")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--exact-below", default=None, help="compare one database under these exact-pool bounds")
    ap.add_argument("--out", default=str(RESULTS / "scale_compare.json"))
    args = ap.parse_args(argv)
    res = run(args)
    return report(args.out, res, markdown(res))


if __name__ == "__main__":
    main()
