"""ACL-filtered kNN: today's `hnsw.ef_search = 400` + exact fallback vs pgvector 0.8's iterative
index scans (relaxed / strict order), side by side in one run, at visible fractions 100 %, 20 %,
5 % and 0.5 %, through the service's own statement (`app.search.repository.vector.vector_ids`) under the
real `visible_to` filter of four readers.

    .venv/bin/python -m bench.speed.filtered_knn [--n 100000] [--base 12000] [--queries 60]

Data (say it plainly): `--base` real all-MiniLM-L6-v2 embeddings (LoCoMo dialogue turns plus the
service bench's synthetic incident sentences), the rest derived as normalised mixtures
0.75·a + 0.25·b of two random base vectors plus Gaussian noise (σ 0.01 per dimension): neither
random vectors (recall collapses, NOTES.md) nor exact copies. All rows are memories of one org,
`group`-visible; every row is in group `all`, and independently in `p20` (20 %), `p5` (5 %),
`p05` (0.5 %) — a reader's groups make its visible fraction. Queries are real embeddings of
fresh questions. Recall@k is against the exact filtered search (`mode="exact"`) for the same
reader; k = 10 (vector search) and k = 100 (the hybrid pool).
"""

from __future__ import annotations

import io
import json
import random
import time
from pathlib import Path

import numpy as np
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from bench.command import parser, save
from bench.common import ROOT, fresh_database, pct

FRACTIONS = {"100%": "all", "20%": "p20", "5%": "p5", "0.5%": "p05"}
# (label, vector_ids mode, ef_search): today's pass at 400; iterative scans from the default 40 and from 100
MODES = (
    ("ef400", "ef", 400),
    ("relaxed40", "relaxed", 40),
    ("relaxed100", "relaxed", 100),
    ("strict40", "strict", 40),
    ("exact", "exact", 0),
    ("auto", "auto", 100),
)  # auto: what the service runs
ALL_MODES = MODES


def base_texts(n: int, rng: random.Random) -> list[str]:
    from bench.speed.service.data import sentence

    out: list[str] = []
    p = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
    if p.exists():
        for conv in json.loads(p.read_text()):
            c = conv["conversation"]
            for key, turns in c.items():
                if key.startswith("session_") and isinstance(turns, list):
                    out += [t["text"] for t in turns if t.get("text")]
    rng.shuffle(out)
    out = out[: n // 2]
    while len(out) < n:
        out.append(sentence(rng))
    return out[:n]


def embed_base(n: int, cache_dir: Path) -> np.ndarray:
    cache = cache_dir / f"filtered_knn_base_{n}.npy"
    if cache.exists():
        return np.load(cache)
    from app.kit.runtime.embedding import LocalEmbedder

    t0 = time.time()
    vecs = LocalEmbedder().embed(base_texts(n, random.Random(7))).astype(np.float32)
    print(f"embedded {n} base texts in {time.time() - t0:.0f} s")
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.save(cache, vecs)
    return vecs


def derive(base: np.ndarray, n: int, seed: int = 11) -> np.ndarray:
    rs = np.random.default_rng(seed)
    extra = n - len(base)
    if extra <= 0:
        return base[:n]
    a, b = rs.integers(0, len(base), extra), rs.integers(0, len(base), extra)
    mix = 0.75 * base[a] + 0.25 * base[b] + rs.normal(0, 0.01, (extra, base.shape[1])).astype(np.float32)
    mix /= np.linalg.norm(mix, axis=1, keepdims=True)
    return np.vstack([base, mix]).astype(np.float32)


def load(settings, vecs: np.ndarray) -> dict:
    """One org, a writer who owns every row, four readers; memories COPYed in, HNSW built after."""
    from app.kit.database.pg import admin_url
    from app.orgs import service as orgs

    eng = create_engine(admin_url(settings))
    info = {"audit_key": settings.audit_secret()}
    with Session(eng, info=info) as db:
        org = orgs.create_org(db, "knn")
        writer = orgs.create_user(db, org, "writer")
        readers = {f: orgs.create_user(db, org, f"reader-{g}", groups=[g]) for f, g in FRACTIONS.items()}
        db.commit()
        ids = {"org": org.id, "writer": writer.id, "readers": {f: (u.id, tuple(u.groups)) for f, u in readers.items()}}
    rs = np.random.default_rng(3)
    u = rs.random(len(vecs))
    t0 = time.time()
    raw = eng.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute("DROP INDEX IF EXISTS ix_memories_embedding_hnsw")
        buf = io.StringIO()
        for i, v in enumerate(vecs):
            groups = (
                ["all"] + (["p20"] if u[i] < 0.2 else []) + (["p5"] if u[i] < 0.05 else []) + (["p05"] if u[i] < 0.005 else [])
            )
            rid = f"{i:08x}-0000-4000-8000-000000000000"
            buf.write(
                f"{rid}\t{rid}\tmemory {i}\tfact\t{ids['org']}\t{ids['writer']}\tgroup\t"
                f"{{{','.join(groups)}}}\t{{}}\t[{','.join(f'{x:.6f}' for x in v)}]\n"
            )
        buf.seek(0)
        with cur.copy(
            "COPY memories (id, root_id, text, kind, org_id, owner_id, visibility, groups, labels, embedding) FROM STDIN"
        ) as cp:
            while chunk := buf.read(1 << 20):
                cp.write(chunk)
        raw.commit()
        t_copy = time.time() - t0
        t1 = time.time()
        cur.execute("SET maintenance_work_mem = '512MB'")
        cur.execute(
            "CREATE INDEX ix_memories_embedding_hnsw ON memories USING hnsw (embedding vector_cosine_ops)"
            " WITH (m = 16, ef_construction = 64)"
        )
        cur.execute("ANALYZE memories")
        raw.commit()
        t_index = time.time() - t1
    finally:
        raw.close()
    eng.dispose()
    visible = {f: int(np.sum(u < {"100%": 2, "20%": 0.2, "5%": 0.05, "0.5%": 0.005}[f])) for f in FRACTIONS}
    return {**ids, "copy_s": round(t_copy, 1), "index_build_s": round(t_index, 1), "visible_rows": visible}


def run(args) -> dict:
    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal, make_engine, make_sessionmaker
    from app.kit.database.pg import app_url
    from app.kit.runtime.embedding import LocalEmbedder
    from app.search import repository as repo
    from app.search.schemas import SearchFilters
    from bench.speed.service.data import query

    settings = fresh_database("memscale_bench_knn")
    vecs = derive(embed_base(args.base, settings.data_dir.resolve() / "bench-cache"), args.n)
    built = load(settings, vecs)
    print(
        f"loaded {args.n} rows: copy {built['copy_s']} s, HNSW build {built['index_build_s']} s; visible {built['visible_rows']}"
    )
    rng = random.Random(5)
    qtexts = [query(rng) for _ in range(args.queries // 2)]
    qtexts += base_texts(args.queries * 4, random.Random(99))[-(args.queries - len(qtexts)) :]  # unseen turns as queries
    qvecs = LocalEmbedder().embed_queries(qtexts)
    eng = make_engine(app_url(settings), pool_size=2)
    sessions = make_sessionmaker(eng)
    f0 = SearchFilters()
    lat: dict = {}
    recall: dict = {}
    exact_used: dict = {}
    short: dict = {}
    for frac, (uid, groups) in built["readers"].items():
        p = Principal(org_id=built["org"], user_id=uid, name="r", roles=("member",), groups=groups, clearances=())
        for k in (10, 100):
            for qi, q in enumerate(qvecs):
                got = {}
                order = list(MODES)
                random.Random(qi).shuffle(order)  # no mode always runs first (warm cache)
                for mode, kind, ef in order:
                    with sessions() as db:
                        bind_principal(db, p)
                        t0 = time.perf_counter()
                        rows, ex = repo.vector_ids(db, p, "memory", q, f0, k, ef_search=ef, mode=kind)
                        dt = time.perf_counter() - t0
                        db.rollback()
                    got[mode] = [r.id for r in rows]
                    key = (frac, k, mode)
                    lat.setdefault(key, []).append(dt)
                    exact_used[key] = exact_used.get(key, 0) + int(ex)
                truth = set(got["exact"])
                for mode, _, _ in MODES:
                    key = (frac, k, mode)
                    recall.setdefault(key, []).append(len(truth & set(got[mode])) / max(1, len(truth)))
                    short[key] = short.get(key, 0) + int(len(got[mode]) < len(truth))
        print(f"{frac} done")
    eng.dispose()
    table = []
    for (frac, k, mode), ts in lat.items():
        table.append(
            {
                "visible": frac,
                "k": k,
                "mode": mode,
                "recall": round(float(np.mean(recall[(frac, k, mode)])), 4),
                "p50_ms": round(pct([t * 1000 for t in ts], 50), 2),
                "p95_ms": round(pct([t * 1000 for t in ts], 95), 2),
                "exact_fallbacks": exact_used[(frac, k, mode)],
                "short_results": short[(frac, k, mode)],
                "queries": len(ts),
            }
        )
    return {
        "n": args.n,
        "base_real_embeddings": args.base,
        "queries": len(qvecs),
        "max_scan_tuples": repo.MAX_SCAN_TUPLES,
        "build": {k: v for k, v in built.items() if k.endswith("_s") or k == "visible_rows"},
        "rows": table,
    }


def markdown(res: dict) -> str:
    lines = [
        f"filtered kNN, {res['n']} memories ({res['base_real_embeddings']} real embeddings, the rest derived), "
        f"{res['queries']} queries, max_scan_tuples {res['max_scan_tuples']}",
        "",
        "| visible | k | mode | recall@k | p50 ms | p95 ms | exact fallbacks | short |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        lines.append(
            f"| {r['visible']} | {r['k']} | {r['mode']} | {r['recall']:.3f} | {r['p50_ms']} | {r['p95_ms']} | "
            f"{r['exact_fallbacks']} | {r['short_results']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "filtered_knn")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--base", type=int, default=12_000)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--modes", default=",".join(m[0] for m in ALL_MODES), help="labels of the modes to run (exact always runs)")
    args = ap.parse_args(argv)
    global MODES
    MODES = tuple(m for m in ALL_MODES if m[0] in args.modes.split(",") or m[0] == "exact")
    res = run(args)
    return save(args.out, res, markdown(res))


if __name__ == "__main__":
    main()
