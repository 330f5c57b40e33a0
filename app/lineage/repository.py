"""Statements over lineage edges and retrieval events."""

from __future__ import annotations

import uuid

from sqlalchemy import delete, insert, select, text
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.tenancy.access import visible_to
from app.lineage.models import LineageEdge, RetrievalEvent

# Walk the edge graph from (type, id); "up" follows derivations to their sources, "down" to
# what was derived. UNION (not ALL) stops cycles; depth bounds the walk.
_WALK = """
WITH RECURSIVE walk(t, i, depth) AS (
  SELECT CAST(:t AS text), CAST(:i AS uuid), 0
  UNION
  SELECT e.{far}_type, e.{far}_id, w.depth + 1 FROM walk w
  JOIN lineage_edges e ON e.org_id = :org AND e.{near}_type = w.t AND e.{near}_id = w.i
    AND (CAST(:as_of AS timestamptz) IS NULL OR e.at <= CAST(:as_of AS timestamptz))
  WHERE w.depth < :depth)
SELECT DISTINCT e.id, e.from_type, e.from_id, e.to_type, e.to_id, e.relation, e.job_id, e.at
FROM walk w JOIN lineage_edges e ON e.org_id = :org AND e.{near}_type = w.t AND e.{near}_id = w.i
  AND (CAST(:as_of AS timestamptz) IS NULL OR e.at <= CAST(:as_of AS timestamptz))
WHERE w.depth < :depth"""
WALK = {"up": _WALK.format(near="from", far="to"), "down": _WALK.format(near="to", far="from")}


def edges(db: Session, org_id: uuid.UUID, type_: str, id_: uuid.UUID, *, direction: str, depth: int, as_of=None) -> list:
    """Edges reachable from (type, id); `as_of`: only those recorded by then. Row-level security
    keeps other branches' edges out (app/kit/tenancy/view.py)."""
    out = []
    for d in ("up", "down") if direction == "both" else (direction,):
        out += db.execute(text(WALK[d]), {"t": type_, "i": id_, "org": org_id, "depth": depth, "as_of": as_of}).all()
    return list({e.id: e for e in out}.values())


def load_visible(db: Session, principal: Principal, model, ids) -> dict:
    if not ids:
        return {}
    stmt = select(model).where(model.id.in_(list(ids)), visible_to(principal, model))
    return {r.id: r for r in db.execute(stmt).scalars()}


def existing_ids(db: Session, org_id: uuid.UUID, model, ids) -> set[uuid.UUID]:
    """Which of `ids` still exist in the org, whoever may see them (ids only, never content)."""
    if not ids:
        return set()
    from app.kit.database.db import existence_only

    with existence_only(db):
        return set(db.execute(select(model.id).where(model.id.in_(list(ids)), model.org_id == org_id)).scalars())


_ADD_RETRIEVAL = insert(RetrievalEvent.__table__)


def add_retrieval(db: Session, **values) -> None:
    """One retrieval event, as one INSERT: every search and context call writes one, and the
    ORM's unit of work for it cost ~10% of a LoCoMo search in Python (docs/decisions/latency.md)."""
    db.execute(_ADD_RETRIEVAL, values)


def retrieval(db: Session, principal: Principal, retrieval_id: uuid.UUID) -> RetrievalEvent | None:
    return db.execute(
        select(RetrievalEvent).where(RetrievalEvent.id == retrieval_id, RetrievalEvent.org_id == principal.org_id)
    ).scalar_one_or_none()


def retrievals_with_item(
    db: Session, principal: Principal, item_id: uuid.UUID, limit: int, only_actor: uuid.UUID | None
) -> list[RetrievalEvent]:
    stmt = select(RetrievalEvent).where(
        RetrievalEvent.org_id == principal.org_id, RetrievalEvent.items.contains([{"id": str(item_id)}])
    )
    if only_actor is not None:
        stmt = stmt.where(RetrievalEvent.actor_id == only_actor)
    return list(db.execute(stmt.order_by(RetrievalEvent.at.desc()).limit(limit)).scalars())


def edges_by_relation(db: Session, org_id: uuid.UUID, relation: str) -> list:
    """(from_id, to_type, to_id) of every edge of `relation` in the org."""
    return db.execute(
        select(LineageEdge.from_id, LineageEdge.to_type, LineageEdge.to_id).where(
            LineageEdge.org_id == org_id, LineageEdge.relation == relation
        )
    ).all()


def delete_retrievals_by(db: Session, org_id: uuid.UUID, actor_id: uuid.UUID) -> int:
    return len(
        db.execute(
            delete(RetrievalEvent)
            .where(RetrievalEvent.org_id == org_id, RetrievalEvent.actor_id == actor_id)
            .returning(RetrievalEvent.id)
        ).all()
    )
