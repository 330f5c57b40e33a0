"""Vector kNN and full-text queries over one item type, always under `visible_to`.

HNSW filters *after* its graph walk, so a restrictive ACL can make `WHERE visible ORDER BY
emb <=> q LIMIT k` come back short (NOTES.md). We plan it knowingly: a first pass lets the
planner use HNSW with a raised `hnsw.ef_search`; if it returns fewer than k rows we run the
exact filtered search (the `+ 0` in ORDER BY keeps HNSW out), which is cheap precisely when the
visible set is small. Statements are never prepared (see app.kit.db.make_engine).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, literal, select, text
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.episodes.models import Episode
from app.kit.access import visible_to
from app.knowledge.models import Chunk, KnowledgeAsset
from app.memories.models import Memory
from app.search.schemas import SearchFilters


@dataclass(frozen=True)
class Spec:
    model: type
    text_col: str
    time_col: str


SPECS = {
    "memory": Spec(Memory, "text", "recorded_at"),
    "episode": Spec(Episode, "content", "occurred_at"),
    "chunk": Spec(Chunk, "text", "created_at"),
}


def _filters(principal: Principal, type_: str, f: SearchFilters) -> list:
    spec = SPECS[type_]
    m = spec.model
    conds = [visible_to(principal, m)]
    if type_ == "memory":
        conds.append(m.status == "active")
    if f.kinds:
        if type_ == "chunk":
            conds.append(m.asset_id.in_(select(KnowledgeAsset.id).where(KnowledgeAsset.kind.in_(f.kinds))))
        else:
            conds.append(m.kind.in_(f.kinds))
    if f.labels:
        conds.append(m.labels.contains(f.labels))
    if f.since:
        conds.append(getattr(m, spec.time_col) >= f.since)
    if f.until:
        conds.append(getattr(m, spec.time_col) < f.until)
    if f.session_id is not None:
        if type_ != "episode":
            conds.append(literal(False))
        else:
            conds.append(m.session_id == f.session_id)
    return conds


def vector_ids(db: Session, principal: Principal, type_: str, qvec, f: SearchFilters, n: int,
               ef_search: int) -> tuple[list[tuple], bool]:
    """Top-n (id, distance) among visible rows; returns (rows, used_exact)."""
    m = SPECS[type_].model
    conds = _filters(principal, type_, f)
    dist = m.embedding.cosine_distance(qvec)
    db.execute(text(f"SET LOCAL hnsw.ef_search = {int(ef_search)}"))
    rows = db.execute(select(m.id, dist.label("d")).where(*conds, m.embedding.is_not(None))
                      .order_by(dist).limit(n)).all()
    if len(rows) >= n:
        return rows, False
    exact = db.execute(select(m.id, dist.label("d")).where(*conds, m.embedding.is_not(None))
                       .order_by(dist + 0).limit(n)).all()
    return exact, True


def text_ids(db: Session, principal: Principal, type_: str, query: str, f: SearchFilters, n: int) -> list[tuple]:
    m = SPECS[type_].model
    tsq = func.websearch_to_tsquery("english", query)
    rank = func.ts_rank_cd(m.tsv, tsq)
    return db.execute(select(m.id, rank.label("r")).where(*_filters(principal, type_, f), m.tsv.op("@@")(tsq))
                      .order_by(rank.desc()).limit(n)).all()


def load(db: Session, principal: Principal, type_: str, ids: list) -> dict:
    if not ids:
        return {}
    m = SPECS[type_].model
    cols = [c for c in m.__table__.columns if c.name not in ("embedding", "tsv")]
    rows = db.execute(select(*cols).where(m.id.in_(ids), visible_to(principal, m))).all()
    return {r.id: r for r in rows}
