"""Deleting an episode reaches everything derived from it (DESIGN.md §4).

The episode row is removed (content gone, not flagged). A memory derived only from removed
sources is removed too (all its versions); one that still has other sources is quarantined
(hidden from every read path) until distillation re-derives it without the removed source.
Lineage edges keep ids only; the audit log records what happened.
"""

from __future__ import annotations

import uuid

from sqlalchemy import and_, select, update
from sqlalchemy.orm import Session

from app.audit.service import record
from app.episodes import repository as episodes_repo
from app.episodes.models import Episode
from app.lineage.models import LineageEdge
from app.memories import repository as memories_repo
from app.memories.models import Memory


def _derived_memories(db: Session, org_id: uuid.UUID, episode_id: uuid.UUID) -> list[Memory]:
    edge = and_(LineageEdge.org_id == org_id, LineageEdge.to_type == "episode", LineageEdge.to_id == episode_id,
                LineageEdge.from_type == "memory", LineageEdge.relation.in_(("distilled_from", "summarised_from")))
    ids = select(LineageEdge.from_id).where(edge)
    return list(db.execute(select(Memory).where(Memory.org_id == org_id, Memory.id.in_(ids)).with_for_update()).scalars())


def _remaining_sources(db: Session, org_id: uuid.UUID, memory_id: uuid.UUID) -> int:
    edges = db.execute(select(LineageEdge.to_type, LineageEdge.to_id).where(
        LineageEdge.org_id == org_id, LineageEdge.from_type == "memory", LineageEdge.from_id == memory_id,
        LineageEdge.relation.in_(("distilled_from", "summarised_from")))).all()
    alive = 0
    for to_type, to_id in edges:
        model = memories_repo.SOURCE_MODELS.get(to_type)
        if model is not None and db.execute(select(model.id).where(model.id == to_id)).first():
            alive += 1
    return alive


def forget_episode(db: Session, *, org_id: uuid.UUID, episode_id: uuid.UUID, actor_id: uuid.UUID | None,
                   job_id: uuid.UUID | None) -> dict:
    derived = _derived_memories(db, org_id, episode_id)
    episodes_repo.hard_delete(db, episode_id)
    db.flush()
    removed, quarantined = [], []
    for m in derived:
        if _remaining_sources(db, org_id, m.id) == 0:
            removed += memories_repo.delete_root(db, org_id, m.root_id)
        else:
            db.execute(update(Memory).where(Memory.id == m.id).values(
                status="quarantined", provenance={**m.provenance, "pending_rederive": True,
                                                  "removed_source": str(episode_id)}))
            quarantined.append(m.id)
    stats = {"episodes_removed": 1, "memories_removed": len(removed), "memories_quarantined": len(quarantined)}
    record(db, org_id=org_id, actor_id=actor_id, action="episode.delete", target_type="episode",
           target_id=episode_id, details={**stats, "job_id": str(job_id) if job_id else None,
                                          "memory_ids": [str(i) for i in removed + quarantined]})
    return stats
