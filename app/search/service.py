"""Hybrid search: vector kNN + full text, fused by reciprocal-rank fusion; a retrieval event per call."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.lineage.service import record_retrieval
from app.search import repository as repo
from app.search.schemas import SearchFilters, SearchIn, SearchResult

RRF_K = 60


def _text_of(type_: str, row) -> str:  # noqa: ANN001
    return row.content if type_ == "episode" else row.text


def to_result(type_: str, row, score: float) -> SearchResult:  # noqa: ANN001
    """A loaded row (repository.load) as a search result."""
    return SearchResult(type=type_, id=row.id, text=_text_of(type_, row), score=round(float(score), 6),
                        visibility=row.visibility, labels=list(row.labels), groups=list(row.groups),
                        created_at=getattr(row, "created_at", None) or row.recorded_at, kind=getattr(row, "kind", None), owner_id=row.owner_id,
                        confidence=getattr(row, "confidence", None), session_id=getattr(row, "session_id", None),
                        content_hash=getattr(row, "content_hash", None), outcome=getattr(row, "outcome", None),
                        occurred_at=getattr(row, "occurred_at", None))


def rank(db: Session, principal: Principal, *, query: str, qvec, types: list[str], k: int, mode: str,
         filters: SearchFilters, ef_search: int) -> tuple[list[SearchResult], dict]:
    """Ranked visible results across `types` (no retrieval event; callers record one)."""
    scored: dict[tuple[str, uuid.UUID], float] = {}
    info = {"exact_fallbacks": 0}
    depth = max(k * 2, 20)
    for t in types:
        if mode in ("hybrid", "vector"):
            rows, exact = repo.vector_ids(db, principal, t, qvec, filters, depth if mode == "hybrid" else k, ef_search)
            info["exact_fallbacks"] += int(exact)
            for i, (id_, d) in enumerate(rows):
                s = 1.0 / (RRF_K + i + 1) if mode == "hybrid" else 1.0 - float(d)
                scored[(t, id_)] = scored.get((t, id_), 0.0) + s
        if mode in ("hybrid", "text"):
            rows = repo.text_ids(db, principal, t, query, filters, max(depth, 50) if mode == "hybrid" else k)
            for i, (id_, r) in enumerate(rows):
                s = 1.0 / (RRF_K + i + 1) if mode == "hybrid" else float(r)
                scored[(t, id_)] = scored.get((t, id_), 0.0) + s
    top = sorted(scored.items(), key=lambda kv: -kv[1])[:k]
    by_type: dict[str, list] = {}
    for (t, id_), _ in top:
        by_type.setdefault(t, []).append(id_)
    loaded = {t: repo.load(db, principal, t, ids) for t, ids in by_type.items()}
    out = [to_result(t, loaded[t][id_], s) for (t, id_), s in top if id_ in loaded[t]]
    return out, info


def query_vector(embedder, body: SearchIn):  # noqa: ANN001, ANN201
    return embedder.embed([body.query])[0] if body.mode != "text" else None


def search(db: Session, principal: Principal, embedder, body: SearchIn, *, ef_search: int,  # noqa: ANN001
           qvec=None):  # noqa: ANN001
    """`qvec`: the query's embedding when the caller computed it already (see app.kit.db.released)."""
    qvec = qvec if qvec is not None else query_vector(embedder, body)
    results, info = rank(db, principal, query=body.query, qvec=qvec, types=list(dict.fromkeys(body.types)),
                         k=body.k, mode=body.mode, filters=body.filters, ef_search=ef_search)
    rid = record_retrieval(db, principal, kind="search", query=body.query,
                           params={"mode": body.mode, "k": body.k, "types": body.types, **info},
                           items=[{"type": r.type, "id": str(r.id), "score": r.score} for r in results])
    return results, rid
