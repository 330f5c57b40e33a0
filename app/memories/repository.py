from __future__ import annotations

import uuid

from sqlalchemy import and_, delete, select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.episodes.models import Episode
from app.kit.access import visible_to
from app.knowledge.models import Chunk, KnowledgeAsset
from app.lineage.models import LineageEdge
from app.memories.models import Memory

SOURCE_MODELS = {"episode": Episode, "memory": Memory, "chunk": Chunk, "asset": KnowledgeAsset}


def get_visible(db: Session, principal: Principal, memory_id: uuid.UUID, *, for_update: bool = False) -> Memory | None:
    stmt = select(Memory).where(Memory.id == memory_id, visible_to(principal, Memory))
    if for_update:
        stmt = stmt.with_for_update()
    return db.execute(stmt).scalar_one_or_none()


def visible_sources(db: Session, principal: Principal, type_: str, ids: list[uuid.UUID]) -> list:
    model = SOURCE_MODELS[type_]
    return list(db.execute(select(model).where(model.id.in_(ids), visible_to(principal, model))).scalars())


def delete_root(db: Session, org_id: uuid.UUID, root_id: uuid.UUID) -> list[uuid.UUID]:
    ids = list(db.execute(delete(Memory).where(Memory.org_id == org_id, Memory.root_id == root_id)
                          .returning(Memory.id)).scalars())
    return ids


DERIVING = ("distilled_from", "summarised_from")  # relations whose target is a memory's content source


def roots_derived_from(db: Session, org_id: uuid.UUID, source_type: str, source_ids: list[uuid.UUID]) -> list[uuid.UUID]:
    """Roots of the memories (any version) derived from these sources, locked for the cascade."""
    if not source_ids:
        return []
    from_ids = select(LineageEdge.from_id).where(
        LineageEdge.org_id == org_id, LineageEdge.from_type == "memory", LineageEdge.to_type == source_type,
        LineageEdge.to_id.in_(source_ids), LineageEdge.relation.in_(DERIVING))
    rows = db.execute(select(Memory.id, Memory.root_id).where(Memory.org_id == org_id, Memory.id.in_(from_ids))
                      .with_for_update()).all()
    return sorted({root for _, root in rows}, key=str)


def live_source_counts(db: Session, org_id: uuid.UUID, root_ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    """How many content sources each memory root still has (edges of any of its versions whose
    target row still exists). One query per source type, not one per edge."""
    if not root_ids:
        return {}
    edges = db.execute(select(Memory.root_id, LineageEdge.to_type, LineageEdge.to_id).join(
        LineageEdge, and_(LineageEdge.org_id == Memory.org_id, LineageEdge.from_type == "memory",
                          LineageEdge.from_id == Memory.id, LineageEdge.relation.in_(DERIVING))).where(
        Memory.org_id == org_id, Memory.root_id.in_(root_ids))).all()
    by_type: dict[str, set] = {}
    for _, t, i in edges:
        by_type.setdefault(t, set()).add(i)
    existing: set[tuple[str, uuid.UUID]] = set()
    for t, ids in by_type.items():
        model = SOURCE_MODELS.get(t)
        if model is not None:
            existing |= {(t, i) for i in db.execute(select(model.id).where(model.id.in_(ids))).scalars()}
    counts = {r: 0 for r in root_ids}
    for root, t, i in {(r, t, i) for r, t, i in edges}:
        counts[root] += (t, i) in existing
    return counts


def quarantine_root(db: Session, org_id: uuid.UUID, root_id: uuid.UUID, *, removed_source: uuid.UUID) -> list[uuid.UUID]:
    """Hide the current version(s) of a memory until it is re-derived without a removed source."""
    rows = db.execute(select(Memory).where(Memory.org_id == org_id, Memory.root_id == root_id,
                                           Memory.status.in_(("active", "quarantined"))).with_for_update()).scalars().all()
    for m in rows:
        m.status = "quarantined"
        m.provenance = {**m.provenance, "pending_rederive": True, "removed_source": str(removed_source)}
    db.flush()
    return [m.id for m in rows]
