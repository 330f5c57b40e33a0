"""The ACL-filtered vector stage at one large org, every way pgvector 0.8 offers, side by side in
one interleaved run (each query runs every variant, in a shuffled order):

- `today`: the service's path before the split (`vector_ids` mode `auto`: iterative relaxed walk
  of the full HNSW index, at most 10,000 tuples, then the exact search if short);
- `iter20k`: the same walk allowed 20,000 tuples (iterative-scan settings for a large org);
- `halfvec`: an HNSW index over `embedding::halfvec(384)`, iterative walk for 2n candidates,
  exact re-ranking of them by the full vectors;
- `binary`: an HNSW index over `binary_quantize(embedding)::bit(384)` (Hamming), iterative walk
  for 4n candidates, exact re-ranking;
- `split`: what the service runs now (`vector_ids` mode `split`): for a caller in no group, the
  org-visible rows by an iterative walk of their partial HNSW index (`WHERE visibility = 'org'`)
  and the caller's own rows (a small set) by the exact search; for a caller in groups, `today`;
- `exact`: the exact filtered search, the ground truth of recall@k.

    .venv/bin/python -m bench.speed.filtered_knn.variants [--n 200000] [--queries 40]

Data: bench/speed/growth/synth.py (synthetic clustered unit vectors written by SQL, 384 dims;
50 % private / 35 % group / 15 % org), all memories of one org with `--users` users and `--groups`
groups. Readers: a member of one group, of three groups, and of none.
"""

from __future__ import annotations

import random
import time

import numpy as np
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session

from bench.command import parser, save
from bench.common import fresh_database, load_average, pct
from bench.speed.growth import synth

INDEXES = (
    "CREATE INDEX ix_memories_embedding_hnsw ON memories USING hnsw (embedding vector_cosine_ops)"
    " WITH (m = 16, ef_construction = 64)",
    "CREATE INDEX ix_memories_embedding_org_hnsw ON memories USING hnsw (embedding vector_cosine_ops)"
    " WITH (m = 16, ef_construction = 64) WHERE visibility = 'org'",
    "CREATE INDEX ix_memories_embedding_half ON memories USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)"
    " WITH (m = 16, ef_construction = 64)",
    "CREATE INDEX ix_memories_embedding_bit ON memories USING hnsw ((binary_quantize(embedding)::bit(384)) bit_hamming_ops)"
    " WITH (m = 16, ef_construction = 64)",
)
VARIANTS = ("today", "iter20k", "halfvec", "binary", "split", "exact")


def load(settings, args) -> dict:
    from app.kit.database.pg import admin_url
    from app.orgs import service as orgs

    eng = create_engine(admin_url(settings))
    with Session(eng, info={"audit_key": settings.audit_secret()}) as db:
        org = orgs.create_org(db, "knn")
        users = [
            orgs.create_user(db, org, f"u{i}", groups=[f"g{j}" for j in range({0: 1, 1: 3}.get(i, 0))]) for i in range(args.users)
        ]
        db.commit()
        readers = {
            "1 group": (users[0].id, ("g0",)),
            "3 groups": (users[1].id, ("g0", "g1", "g2")),
            "no group": (users[2].id, ()),
        }
        uids, org_id = [u.id for u in users], org.id
    raw = eng.raw_connection()
    t0 = time.time()
    try:
        cur = raw.cursor()
        cur.execute("DROP INDEX IF EXISTS ix_memories_embedding_hnsw")
        cur.execute("DROP INDEX IF EXISTS ix_memories_embedding_org_hnsw")
        raw.commit()
        synth.setup(raw)
        synth.grow(raw, org_id, uids, None, args.groups, "memory", 0, args.n)
        t_rows = time.time() - t0
        builds = {}
        cur.execute("SET maintenance_work_mem = '1GB'")
        for ddl in INDEXES:
            if ("_half " in ddl and "halfvec" not in args.variants) or ("_bit " in ddl and "binary" not in args.variants):
                continue
            t1 = time.time()
            cur.execute(ddl)
            raw.commit()
            builds[ddl.split()[2]] = round(time.time() - t1, 1)
            print("built", ddl.split()[2], builds[ddl.split()[2]], "s", flush=True)
        cur.execute("ANALYZE memories")
        raw.commit()
        queries = synth.query_vectors(raw, args.queries)
    finally:
        raw.close()
        eng.dispose()
    return {"org": org_id, "readers": readers, "rows_s": round(t_rows, 1), "index_build_s": builds, "queries": queries}


def _quantised(db, p, q, n: int, kind: str) -> list:
    """halfvec / binary: an iterative walk of the quantised index for a few n candidates, re-ranked exactly."""
    from app.kit.registry import ITEM_TYPES
    from app.search.repository.filters import servable
    from app.search.schemas import SearchFilters

    m = ITEM_TYPES["memory"].model
    if kind == "halfvec":
        order, cand = text("(memories.embedding::halfvec(384)) <=> CAST(:q AS halfvec(384))"), 2 * n
    else:
        order, cand = text("(binary_quantize(memories.embedding)::bit(384)) <~> binary_quantize(CAST(:q AS vector(384)))"), 4 * n
    inner = (
        select(m.id, m.embedding)
        .where(*servable(p, "memory", SearchFilters()), m.embedding.is_not(None))
        .order_by(order)
        .limit(cand)
        .subquery()
    )
    dist = inner.c.embedding.cosine_distance(q)
    stmt = select(inner.c.id.label("id"), dist.label("d")).order_by(dist).limit(n)
    db.execute(text("SET LOCAL hnsw.ef_search = 100"))
    db.execute(text("SET LOCAL hnsw.iterative_scan = relaxed_order"))
    db.execute(text("SET LOCAL hnsw.max_scan_tuples = 20000"))
    db.execute(text("SET LOCAL enable_sort = off"))
    rows = db.execute(stmt, {"q": "[" + ",".join(map(str, q)) + "]"}).all()
    db.execute(text("SET LOCAL enable_sort = on"))
    return rows


def run(args) -> dict:
    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal, make_engine, make_sessionmaker
    from app.kit.database.pg import app_url
    from app.search import repository as repo
    from app.search.repository.bm25 import visible_count
    from app.search.schemas import SearchFilters

    settings = fresh_database("memscale_bench_knnv")
    built = load(settings, args)
    print(f"loaded {args.n} rows in {built['rows_s']} s; indexes {built['index_build_s']}", flush=True)
    eng = make_engine(app_url(settings), pool_size=2)
    sessions = make_sessionmaker(eng)
    f0 = SearchFilters()
    lat: dict = {}
    recall: dict = {}
    visible: dict = {}
    for who, (uid, groups) in built["readers"].items():
        p = Principal(org_id=built["org"], user_id=uid, name="r", roles=("member",), groups=groups, clearances=())
        with sessions() as db:
            bind_principal(db, p)
            visible[who] = visible_count(db, p, "memory", f0)
        for k in (10, 100):
            for qi, (_, q) in enumerate(built["queries"]):
                q = np.array(q, dtype=np.float32)
                got = {}
                order = [v for v in VARIANTS if v in args.variants]
                random.Random(qi).shuffle(order)
                for v in order:
                    with sessions() as db:
                        bind_principal(db, p)
                        t0 = time.perf_counter()
                        if v in ("halfvec", "binary"):
                            rows = _quantised(db, p, q, k, v)
                        else:
                            mode = {"today": "auto", "iter20k": "relaxed"}.get(v, v)  # split, exact
                            rows, _ = repo.vector_ids(db, p, "memory", q, f0, k, ef_search=100, mode=mode)
                        lat.setdefault((who, k, v), []).append(time.perf_counter() - t0)
                        db.rollback()
                    got[v] = [str(r.id) for r in rows]
                truth = set(got["exact"])
                for v in order:
                    recall.setdefault((who, k, v), []).append(len(truth & set(got[v])) / max(1, len(truth)))
        print(f"{who} done", flush=True)
    eng.dispose()
    rows = [
        {
            "reader": who,
            "visible": visible[who],
            "k": k,
            "variant": v,
            "recall": round(float(np.mean(recall[(who, k, v)])), 4),
            "p50_ms": round(pct([t * 1000 for t in ts], 50), 2),
            "p95_ms": round(pct([t * 1000 for t in ts], 95), 2),
        }
        for (who, k, v), ts in lat.items()
    ]
    return {
        "n": args.n,
        "users": args.users,
        "groups": args.groups,
        "queries": len(built["queries"]),
        "load": load_average(),
        "rows_s": built["rows_s"],
        "index_build_s": built["index_build_s"],
        "rows": rows,
    }


def markdown(res: dict) -> str:
    lines = [
        f"ACL-filtered kNN at one org of {res['n']} memories ({res['users']} users, {res['groups']} groups), "
        f"{res['queries']} queries, load {res['load']}; index builds (s): {res['index_build_s']}",
        "",
        "| reader (visible rows) | k | variant | recall@k | p50 ms | p95 ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(res["rows"], key=lambda r: (r["reader"], r["k"], VARIANTS.index(r["variant"]))):
        lines.append(
            f"| {r['reader']} ({r['visible']}) | {r['k']} | {r['variant']} | {r['recall']:.3f} | {r['p50_ms']} | {r['p95_ms']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "filtered_knn_variants")
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--users", type=int, default=200)
    ap.add_argument("--groups", type=int, default=20)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="which to run (exact always runs: the truth)")
    args = ap.parse_args(argv)
    args.variants = set(args.variants.split(",")) | {"exact"}
    res = run(args)
    return save(args.out, res, markdown(res))


if __name__ == "__main__":
    main()
