"""What the scale bench measures on a loaded database: hybrid search server-side (the service's
`rank`, as bench.speed.service) and over HTTP, recall of the service's vector search against the exact
filtered kNN under the same `visible_to` (as bench.speed.filtered_knn), and ingest over HTTP against
the embedding model alone (as bench.speed.service)."""

from __future__ import annotations

import random
import time

import numpy as np

from bench.common import summary_ms

TYPES = ("memory", "episode")  # the item types holding rows; hybrid search also asks for chunks


def queries(n: int, seed: int = 5) -> list[str]:
    """Half bench.speed.service's synthetic questions, half LoCoMo turns outside the base set."""
    from bench.speed.filtered_knn.__main__ import base_texts
    from bench.speed.service.data import query

    rng = random.Random(seed)
    out = [query(rng) for _ in range(n // 2)]
    return out + base_texts(n * 4, random.Random(99))[-(n - len(out)) :]


def reader(admin, settings, org_name: str, name: str = "u0"):
    """The measured reader of an org (u0: group g0, no clearance) and an API key for it."""
    from sqlalchemy.orm import Session

    from app.auth.principal import Principal
    from app.orgs import service as orgs

    with Session(admin, info={"audit_key": settings.audit_secret()}) as db:
        u = orgs.user_by_name(db, orgs.org_by_name(db, org_name), name)
        key = orgs.create_key(db, u)
        p = Principal(
            org_id=u.org_id, user_id=u.id, name=name, roles=tuple(u.roles), groups=tuple(u.groups), clearances=tuple(u.clearances)
        )
        db.commit()
    return p, key


def visible_rows(app, admin, p) -> dict:
    """The org's rows of each type (owner role, no RLS) and how many of them `p` may see."""
    from sqlalchemy import func, select
    from sqlalchemy.orm import Session

    from app.kit.database.db import bind_principal
    from app.kit.registry import ITEM_TYPES
    from app.kit.tenancy.access import visible_to

    out = {}
    with app.state.sessions() as db:
        bind_principal(db, p)
        for t in TYPES:
            m = ITEM_TYPES[t].model
            out[t] = {"visible": db.execute(select(func.count()).where(visible_to(p, m))).scalar_one()}
        db.rollback()
    with Session(admin) as db:
        for t in TYPES:
            m = ITEM_TYPES[t].model
            out[t]["org_rows"] = db.execute(select(func.count()).where(m.org_id == p.org_id)).scalar_one()
    return out


def search_class(app, http, settings, p, key: str, qtexts: list[str], qvecs) -> dict:
    from app.kit.database.db import bind_principal
    from app.search import repository as repo
    from app.search.schemas import SearchFilters
    from app.search.service import RankCall, rank

    f0 = SearchFilters()
    server, over_http, fallbacks = [], [], 0
    for i, (q, v) in enumerate([(qtexts[-1], qvecs[-1]), *zip(qtexts, qvecs)]):  # the first one warms up
        with app.state.sessions() as db:
            bind_principal(db, p)
            t0 = time.perf_counter()
            _, info = rank(
                db,
                RankCall(
                    principal=p,
                    query=q,
                    qvec=v,
                    types=["memory", "episode", "chunk"],
                    k=10,
                    mode="hybrid",
                    filters=f0,
                    ef_search=settings.hnsw_ef_search,
                ),
            )
            dt = time.perf_counter() - t0
            db.rollback()
        if i:
            server.append(dt)
            fallbacks += info["exact_fallbacks"]
        t0 = time.perf_counter()
        http.post("/v1/search", json={"query": q, "k": 10}, headers={"Authorization": f"Bearer {key}"}).raise_for_status()
        if i:
            over_http.append(time.perf_counter() - t0)
    recall: dict = {}
    vec_lat: dict = {}
    for t in TYPES:
        for _q, v in zip(qtexts, qvecs):
            with app.state.sessions() as db:
                bind_principal(db, p)
                t0 = time.perf_counter()
                truth = [r.id for r in repo.vector_ids(db, p, t, v, f0, 100, ef_search=0, mode="exact")[0]]
                vec_lat.setdefault(f"{t}@100 exact", []).append(time.perf_counter() - t0)
                for k in (10, 100):
                    t0 = time.perf_counter()
                    got = repo.vector_ids(db, p, t, v, f0, k, ef_search=settings.hnsw_ef_search, mode="auto")[0]
                    vec_lat.setdefault(f"{t}@{k}", []).append(time.perf_counter() - t0)
                    want = set(truth[:k])
                    recall.setdefault(f"{t}@{k}", []).append(len(want & {r.id for r in got}) / max(1, len(want)))
                db.rollback()
    return {
        "hybrid_all_types_server": summary_ms(server),
        "hybrid_all_types_http": summary_ms(over_http),
        "hybrid_exact_fallbacks": fallbacks,
        "recall": {k: round(float(np.mean(v)), 4) for k, v in recall.items()},
        "vector_auto": {k: summary_ms(v) for k, v in vec_lat.items()},
    }


def ingest(http, embedder, key: str, n: int, batch: int = 250, seed: int = 9) -> dict:
    """n episodes over HTTP (embedding, ACL, DB with every index, audit) against the model alone on
    the same texts, measured before and after and averaged (the machine is shared)."""
    from bench.speed.service.data import sentence

    rng = random.Random(seed)
    texts = [sentence(rng) for _ in range(n)]

    def model_alone() -> float:
        t0 = time.perf_counter()
        for j in range(0, len(texts), batch):
            embedder.embed(texts[j : j + batch])
        return len(texts) / (time.perf_counter() - t0)

    before = model_alone()
    t0 = time.perf_counter()
    for j in range(0, n, batch):
        items = [{"kind": "note", "content": t, "visibility": "org"} for t in texts[j : j + batch]]
        http.post("/v1/episodes/batch", json={"items": items}, headers={"Authorization": f"Bearer {key}"}).raise_for_status()
    rate = n / (time.perf_counter() - t0)
    model = (before + model_alone()) / 2
    return {
        "items": n,
        "ingest_items_per_s": round(rate, 1),
        "model_alone_items_per_s": round(model, 1),
        "ingest_vs_model": round(rate / model, 3),
        "ms_per_item_beyond_model": round(1000 / rate - 1000 / model, 2),
    }
