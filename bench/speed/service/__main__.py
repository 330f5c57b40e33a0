"""bench/speed/service: ingest rate vs. the embedding model alone, search latency (server-side and
over HTTP), and recall@10 under a 5%-visible ACL filter against exact filtered kNN; side by side
in the run: hybrid's exact pool vs the HNSW walk, and the vocabulary lift on vs off.

    .venv/bin/python -m bench.speed.service [--n 10000] [--queries 200]

Everything runs in one process on loopback against a fresh database `memscale_bench` in the
embedded PostgreSQL; figures go to stdout and bench/results/service.json.
"""

from __future__ import annotations

import random
import time

import httpx
import numpy as np
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from bench.command import parser, save
from bench.common import fresh_database, serve_in_thread, summary_ms
from bench.speed.service.data import query, sentence


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "service")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--org-share", type=float, default=0.005, help="share of items visible to the whole org")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)

    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal
    from app.kit.runtime.embedding import LocalEmbedder
    from app.main import create_app
    from app.orgs import service as orgs
    from app.search.schemas import SearchFilters
    from app.search.service import RankCall, rank

    settings = fresh_database("memscale_bench").model_copy(update={"max_batch_items": args.batch, "log_level": "WARNING"})
    admin = create_engine(settings.database_url)
    with Session(admin, expire_on_commit=False) as db:
        org = orgs.create_org(db, "bench")
        users = [orgs.create_user(db, org, f"u{i}") for i in range(args.users)]
        keys = [orgs.create_key(db, u) for u in users]
        other = orgs.create_org(db, "other-org")
        okey = orgs.create_key(db, orgs.create_user(db, other, "x"))
        db.commit()

    embedder = LocalEmbedder()
    app = create_app(settings, embedder=embedder)
    base = serve_in_thread(app)
    http = httpx.Client(base_url=base, timeout=120)

    texts = [sentence(rng) for _ in range(args.n)]
    # 1. The embedding model alone, on the same kind of texts and batch size; measured before
    # and after the ingest and averaged, since the machine is shared and noisy.
    sample = texts[: min(2000, args.n)]
    embedder.embed(sample[:64])

    # the same model on eager torch (MEMSCALE_EMBEDDING_BACKEND=torch), side by side with the
    # default backend (ONNX Runtime) that the service ingests with
    torch_embedder = LocalEmbedder(backend="torch") if embedder.backend != "torch" else embedder
    torch_embedder.embed(sample[:64])

    def model_alone(emb=embedder) -> float:
        t0 = time.perf_counter()
        for j in range(0, len(sample), args.batch):
            emb.embed(sample[j : j + args.batch])
        return len(sample) / (time.perf_counter() - t0)

    rate_before, torch_before = model_alone(), model_alone(torch_embedder)

    # 2. Ingest over HTTP in batches (embeddings + ACL + DB + audit + HTTP), owners round-robin.
    per_owner: dict[int, list[dict]] = {}
    for i, t in enumerate(texts):
        vis = "org" if rng.random() < args.org_share else "private"
        per_owner.setdefault(i % args.users, []).append({"kind": "note", "content": t, "visibility": vis})
    t0 = time.perf_counter()
    for u, items in per_owner.items():
        for j in range(0, len(items), args.batch):
            r = http.post(
                "/v1/episodes/batch", json={"items": items[j : j + args.batch]}, headers={"Authorization": f"Bearer {keys[u]}"}
            )
            r.raise_for_status()
    ingest_s = time.perf_counter() - t0
    ingest_rate = args.n / ingest_s
    model_rate = (rate_before + model_alone()) / 2
    torch_rate = (torch_before + model_alone(torch_embedder)) / 2
    del torch_embedder
    http.post(
        "/v1/episodes/batch",
        json={"items": [{"kind": "note", "content": sentence(rng), "visibility": "org"} for _ in range(50)]},
        headers={"Authorization": f"Bearer {okey}"},
    )
    with admin.connect() as c:
        c.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE episodes"))
        total = c.execute(text("SELECT count(*) FROM episodes WHERE org_id = :o"), {"o": org.id}).scalar()
        visible = c.execute(
            text("SELECT count(*) FROM episodes WHERE org_id = :o AND (owner_id = :u OR visibility = 'org')"),
            {"o": org.id, "u": users[0].id},
        ).scalar()

    p = Principal(org_id=org.id, user_id=users[0].id, name="u0", roles=("member",), groups=(), clearances=())
    queries = [query(rng) for _ in range(args.queries)]
    qvecs = embedder.embed_queries(queries)

    # 3. Server-side latency (query embedding excluded), per mode.
    server: dict[str, dict] = {}
    fallbacks = 0
    for label, mode, types in (
        ("hybrid", "hybrid", ["episode"]),
        ("vector", "vector", ["episode"]),
        ("text", "text", ["episode"]),
        ("hybrid_all_types", "hybrid", ["memory", "episode", "chunk"]),
    ):
        lat = []
        for q, v in zip(queries, qvecs):
            with app.state.sessions() as db:
                bind_principal(db, p)
                t0 = time.perf_counter()
                _, info = rank(
                    db,
                    RankCall(
                        principal=p,
                        query=q,
                        qvec=v,
                        types=types,
                        k=10,
                        mode=mode,
                        filters=SearchFilters(),
                        ef_search=settings.hnsw_ef_search,
                    ),
                )
                lat.append(time.perf_counter() - t0)
                fallbacks += info["exact_fallbacks"] if label == "vector" else 0
                db.rollback()
        server[label] = summary_ms(lat)

    from dataclasses import replace

    from app.search.tuning import DEFAULT_TUNING

    def interleaved(arms: dict[str, dict], types: list[str]) -> tuple[dict[str, list], int]:
        """Hybrid rankings under each arm's tuning, query by query (the arms' order alternating):
        the times per arm, and on how many queries every arm gave the same top 10."""
        times: dict[str, list] = {arm: [] for arm in arms}
        same = 0
        for i, (q, v) in enumerate(zip(queries, qvecs)):
            tops = {}
            for arm in list(arms) if i % 2 else list(reversed(arms)):
                with app.state.sessions() as db:
                    bind_principal(db, p)
                    t0 = time.perf_counter()
                    got, _ = rank(
                        db,
                        RankCall(
                            principal=p,
                            query=q,
                            qvec=v,
                            types=types,
                            k=10,
                            mode="hybrid",
                            filters=SearchFilters(),
                            ef_search=settings.hnsw_ef_search,
                            tuning=replace(DEFAULT_TUNING, **arms[arm]),
                        ),
                    )
                    times[arm].append(time.perf_counter() - t0)
                    tops[arm] = [r.id for r in got]
                    db.rollback()
            same += len({tuple(t) for t in tops.values()}) == 1
        return times, same

    # 3b. Hybrid's exact pool below the visible count vs. the HNSW walk always (exact_below=0),
    # interleaved query by query in this one run; the top 10 must be the same.
    side_by_side: dict[str, dict] = {}
    for label, types in (("hybrid", ["episode"]), ("hybrid_all_types", ["memory", "episode", "chunk"])):
        arms, same = interleaved({"walk": {"exact_below": 0}, "exact_below": {"exact_below": DEFAULT_TUNING.exact_below}}, types)
        side_by_side[label] = {arm: summary_ms(v) for arm, v in arms.items()}
        side_by_side[label]["same_top10"] = f"{same}/{len(queries)}"
        side_by_side[label]["p95_ratio"] = round(
            side_by_side[label]["exact_below"]["p95_ms"] / side_by_side[label]["walk"]["p95_ms"], 3
        )

    # 3c. The vocabulary lift (app/search/lexicon.py) on vs off, interleaved query by query.
    lift, _ = interleaved({"on": {}, "off": {"vocab_terms": 0}}, ["memory", "episode", "chunk"])
    vocabulary_lift = {arm: summary_ms(v) for arm, v in lift.items()}
    vocabulary_lift["p95_ratio"] = round(vocabulary_lift["on"]["p95_ms"] / vocabulary_lift["off"]["p95_ms"], 3)
    vocabulary_lift["p50_ratio"] = round(vocabulary_lift["on"]["p50_ms"] / vocabulary_lift["off"]["p50_ms"], 3)

    # 4. Over HTTP (auth, query embedding, retrieval event, JSON included).
    lat = []
    h = {"Authorization": f"Bearer {keys[0]}"}
    for q in queries:
        t0 = time.perf_counter()
        http.post("/v1/search", json={"query": q, "k": 10}, headers=h).raise_for_status()
        lat.append(time.perf_counter() - t0)
    over_http = summary_ms(lat)

    # 5. recall@10 of the service's vector search vs. exact filtered kNN (computed independently).
    recalls = []
    with admin.connect() as c:
        for q, v in zip(queries, qvecs):
            with app.state.sessions() as db:
                bind_principal(db, p)
                got, _ = rank(
                    db,
                    RankCall(
                        principal=p,
                        query=q,
                        qvec=v,
                        types=["episode"],
                        k=10,
                        mode="vector",
                        filters=SearchFilters(),
                        ef_search=settings.hnsw_ef_search,
                    ),
                )
            exact = (
                c.execute(
                    text(
                        "SELECT id FROM episodes WHERE org_id = :o AND (owner_id = :u OR visibility = 'org') "
                        "ORDER BY (embedding <=> CAST(:v AS vector)) + 0 LIMIT 10"
                    ),
                    {"o": org.id, "u": users[0].id, "v": str(list(map(float, v)))},
                )
                .scalars()
                .all()
            )
            recalls.append(len({r.id for r in got} & set(exact)) / max(1, len(exact)))

    result = {
        "n_items": total,
        "visible_to_bench_user": visible,
        "visible_share": round(visible / total, 4),
        "embedding_backend": embedder.backend,
        "embedding_model_alone_items_per_s": round(model_rate, 1),
        "embedding_model_alone_torch_items_per_s": round(torch_rate, 1),
        "ingest_items_per_s": round(ingest_rate, 1),
        "ingest_vs_model": round(ingest_rate / model_rate, 3),
        "search_server_side": server,
        "search_over_http_hybrid_all_types": over_http,
        "hybrid_exact_below_vs_walk": side_by_side,
        "hybrid_all_types_vocabulary_lift_on_vs_off": vocabulary_lift,
        "recall_at_10_vector_5pct_visible": round(float(np.mean(recalls)), 4),
        "exact_fallback_share_vector": round(fallbacks / len(queries), 3),
        "hnsw_ef_search": settings.hnsw_ef_search,
        "queries": len(queries),
    }
    print(f"\nbench.speed.service  n={total} items in one org, bench user sees {visible} ({visible / total:.1%})")
    print(f"  embedding model alone     {model_rate:8.1f} items/s ({embedder.backend}; eager torch {torch_rate:.1f})")
    print(f"  ingest over HTTP (batch)  {ingest_rate:8.1f} items/s  = {ingest_rate / model_rate:.1%} of the model")
    print(f"  {'search':28s} {'p50 ms':>8s} {'p95 ms':>8s} {'p99 ms':>8s}")
    for k, v in server.items():
        print(f"  server-side {k:16s} {v['p50_ms']:8.2f} {v['p95_ms']:8.2f} {v['p99_ms']:8.2f}")
    for k, v in side_by_side.items():
        print(
            f"  {k}: exact pool below {DEFAULT_TUNING.exact_below} visible p50/p95 {v['exact_below']['p50_ms']:.2f}/"
            f"{v['exact_below']['p95_ms']:.2f} vs HNSW walk {v['walk']['p50_ms']:.2f}/{v['walk']['p95_ms']:.2f} "
            f"(p95 ratio {v['p95_ratio']}, same top 10 {v['same_top10']})"
        )
    print(
        f"  hybrid all types, vocabulary lift on/off p50 {vocabulary_lift['on']['p50_ms']:.2f}/"
        f"{vocabulary_lift['off']['p50_ms']:.2f} p95 {vocabulary_lift['on']['p95_ms']:.2f}/"
        f"{vocabulary_lift['off']['p95_ms']:.2f} (p95 ratio {vocabulary_lift['p95_ratio']})"
    )
    print(
        f"  {'over HTTP hybrid (all types)':28s} {over_http['p50_ms']:8.2f} {over_http['p95_ms']:8.2f} {over_http['p99_ms']:8.2f}"
    )
    print(
        f"  recall@10 vector under ACL filter: {result['recall_at_10_vector_5pct_visible']:.4f} "
        f"(exact fallback on {result['exact_fallback_share_vector']:.0%} of queries)"
    )
    http.close()
    return save(args.out, result)


if __name__ == "__main__":
    main()
