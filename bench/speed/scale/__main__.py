"""bench/speed/scale: one million items (episodes + memories) over a thousand orgs, skewed, many users,
mixed visibility; hybrid search latency, recall under the ACL, ingest rate, build time and sizes
per org size class.

    nice -n 15 .venv/bin/python -m bench.speed.scale [--items 1000000 --orgs 1000] [--layout hash|global] [--partitions 16]

How the data is made is in bench/speed/scale/data.py. The load runs in two stages so that ingest is
compared at two table sizes in one run: items n < items/10 are inserted with the secondary
indexes dropped, the indexes rebuilt (timed) and `--ingest` episodes written over HTTP; then the
rest likewise, the ingest repeated, and search measured for the largest org, a 2 % org and the
median small org. `--layout hash` (the default) measures the schema as migrated: episodes and
memories hash-partitioned by org_id since migration 0015 (16 partitions, one HNSW index per
partition; `--partitions N` rebuilds them with N); `--layout global` migrates the bench database
down to 0014 first, one table per type with a global HNSW index (bench/speed/scale/layout.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import numpy as np
from sqlalchemy import create_engine

from bench.command import parser, save
from bench.common import RESULTS, fresh_database, load_average, serve_in_thread


def run(args, embedder=None) -> dict:
    from app.kit.database.pg import admin_url
    from app.kit.runtime.embedding import LocalEmbedder
    from app.main import create_app
    from bench.speed.filtered_knn.__main__ import base_texts, embed_base
    from bench.speed.scale import data, layout, measure

    t_start = time.perf_counter()
    settings = fresh_database(args.db).model_copy(update={"log_level": "WARNING"})
    res: dict = {"args": vars(args), "layout": args.layout, "load_average": {"start": load_average()}}
    layout.apply(settings, args.layout, args.partitions)
    res["tables"] = layout.describe(settings)  # partitions per table and the revision measured
    sizes = data.org_sizes(args.items, args.orgs)
    small = 11 + int(np.argsort(sizes[11:])[len(sizes[11:]) // 2])
    classes = {"largest": 0, "2 %": 1, "small (median)": small}
    t0 = time.perf_counter()
    tenants = data.create_tenants(settings, sizes)
    res["orgs"] = {
        "count": len(sizes),
        "sizes": {k: int(sizes[i]) for k, i in classes.items()},
        "users": int(sum(len(u) for u in tenants["user_ids"])),
        "tenants_s": round(time.perf_counter() - t0, 1),
    }
    base = min(args.base, args.items)
    texts = base_texts(base, __import__("random").Random(7))
    t0 = time.perf_counter()
    vecs = embed_base(base, Path(args.cache) if args.cache else settings.data_dir.resolve() / "bench-cache")
    res["base_embed_s"] = round(time.perf_counter() - t0, 1)
    admin = create_engine(admin_url(settings))
    raw = admin.raw_connection()
    t0 = time.perf_counter()
    data.stage_vectors(raw, texts, vecs)
    data.stage_items(raw, sizes, tenants, base)
    res["staging_s"] = round(time.perf_counter() - t0, 1)
    print(f"staged {args.items} items over {len(sizes)} orgs in {res['staging_s']} s", flush=True)

    embedder = embedder or LocalEmbedder()
    app = create_app(settings, embedder=embedder)
    http = httpx.Client(base_url=serve_in_thread(app), timeout=300)
    writer = measure.reader(admin, settings, "scale-0000", "u1")[1]
    cut = args.items // 10 if args.stage1 else 0
    res["stages"] = []
    for lo, hi in ((0, cut), (cut, args.items)):
        if hi <= lo:
            continue
        st = data.load_stage(raw, lo, hi, base)
        st["rows_after"] = hi
        st["load_average"] = load_average()
        st["ingest"] = measure.ingest(http, embedder, writer, args.ingest)
        print(f"ingest at {hi} items: {st['ingest']}  (load {load_average()})", flush=True)
        res["stages"].append(st)
        save(args.out, res, markdown(res), echo=False)
    res["build_s"] = round(time.perf_counter() - t_start, 1)
    res["sizes"] = data.sizes_report(raw.cursor())
    raw.rollback()

    qtexts = measure.queries(args.queries)
    qvecs = embedder.embed_queries(qtexts)
    res["classes"] = {}
    for label, i in classes.items():
        p, key = measure.reader(admin, settings, f"scale-{i:04d}")
        r = {"org_items": int(sizes[i]), "visible": measure.visible_rows(app, admin, p), "load_average_before": load_average()}
        r.update(measure.search_class(app, http, settings, p, key, qtexts, qvecs))
        r["load_average_after"] = load_average()
        res["classes"][label] = r
        print(label, r, flush=True)
        save(args.out, res, markdown(res), echo=False)
    res["total_s"] = round(time.perf_counter() - t_start, 1)
    http.close()
    raw.close()
    admin.dispose()
    if not args.keep:
        data.drop_staging(settings)
    return res


def markdown(res: dict) -> str:
    a = res["args"]
    parts = res.get("tables", {}).get("episodes")
    shape = f"{parts} partitions per table" if parts else "one table per type"
    lines = [
        f"# bench/speed/scale: {a['items']:,} items over {a['orgs']:,} orgs, layout {res['layout']} ({shape})",
        "",
        f"Orgs: {res['orgs']['sizes']}; {res['orgs']['users']:,} users. Base: {min(a['base'], a['items']):,} "
        f"real MiniLM embeddings, the rest derived (bench/speed/scale/data.py). Build {res.get('build_s', '?')} s "
        f"(tenants {res['orgs']['tenants_s']} s, base embedding {res['base_embed_s']} s, staging {res['staging_s']} s).",
        "",
        "| rows after stage | insert s (ep / mem) | index build s (ep + mem) | HTTP ingest items/s "
        "| model alone items/s | ingest/model | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for st in res.get("stages", []):
        ins, ing = st["insert_s"], st["ingest"]
        hnsw = [v for k, v in st["index_s"].items() if k.endswith("_hnsw")]
        idx = f"HNSW {' + '.join(map(str, hnsw))}, others {round(sum(st['index_s'].values()) - sum(hnsw), 1)}"
        lines.append(
            f"| {st['rows_after']:,} | {ins.get('episodes')} / {ins.get('memories')} | {idx} | "
            f"{ing['ingest_items_per_s']} | {ing['model_alone_items_per_s']} | {ing['ingest_vs_model']} | {st['load_average']} |"
        )
    if "sizes" in res:
        lines += ["", "| table | rows | total MB | heap MB | indexes MB | largest indexes MB |", "|---|---|---|---|---|---|"]
        for t, s in res["sizes"].items():
            big = ", ".join(f"{k} {v}" for k, v in list(s["index_mb"].items())[:3])
            lines.append(f"| {t} | {s['rows']:,} | {s['total_mb']:,} | {s['heap_mb']:,} | {s['indexes_mb']:,} | {big} |")
    if res.get("classes"):
        lines += [
            "",
            "| org | items | visible to u0 (mem / ep) | hybrid server p50/p95/p99 ms | hybrid HTTP p50/p95/p99 ms | "
            "recall@10 mem / ep | recall@100 mem / ep | vector@100 p95 ms mem / ep | load |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for label, r in res["classes"].items():
            s, h, rc, v = r["hybrid_all_types_server"], r["hybrid_all_types_http"], r["recall"], r["vector_auto"]
            vis = r["visible"]
            lines.append(
                f"| {label} | {r['org_items']:,} | {vis['memory']['visible']:,} / {vis['episode']['visible']:,} | "
                f"{s['p50_ms']} / {s['p95_ms']} / {s['p99_ms']} | {h['p50_ms']} / {h['p95_ms']} / {h['p99_ms']} | "
                f"{rc['memory@10']} / {rc['episode@10']} | {rc['memory@100']} / {rc['episode@100']} | "
                f"{v['memory@100']['p95_ms']} / {v['episode@100']['p95_ms']} | "
                f"{r['load_average_before']} → {r['load_average_after']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None, embedder=None) -> dict:
    ap = parser(__doc__, None)
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--orgs", type=int, default=1000)
    ap.add_argument(
        "--layout",
        choices=("hash", "global"),
        default="hash",
        help="hash: the schema since migration 0015; global: migrated down to 0014 (one table per type)",
    )
    ap.add_argument("--partitions", type=int, default=16, help="hash layout: partitions per table (16 = migration 0015)")
    ap.add_argument("--base", type=int, default=12_000, help="items with a real embedding (the rest derived)")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--ingest", type=int, default=1000, help="episodes written over HTTP after each stage")
    ap.add_argument("--stage1", type=int, default=1, help="1: measure ingest at items/10 first (0: one stage)")
    ap.add_argument("--db", default=None, help="default: memscale_bench_scale_hash (hash), memscale_bench_scale (global)")
    ap.add_argument("--keep", action="store_true", help="keep the staging tables")
    ap.add_argument("--cache", default="", help="folder of the base embeddings' cache (default: data dir/bench-cache)")
    ap.add_argument("--out", type=Path, default=None, help="default: bench/results/scale_hash.json (hash), scale.json (global)")
    args = ap.parse_args(argv)
    hashed = args.layout == "hash"  # the names earlier runs used for each layout
    args.db = args.db or ("memscale_bench_scale_hash" if hashed else "memscale_bench_scale")
    args.out = args.out or RESULTS / ("scale_hash.json" if hashed else "scale.json")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    res = run(args, embedder)
    return save(args.out, res, markdown(res))


if __name__ == "__main__":
    main()
