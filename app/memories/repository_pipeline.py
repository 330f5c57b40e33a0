"""Queries the pipelines run over a whole org (all scopes; the job binds `all_scopes`)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import and_, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from app.episodes.models import Episode
from app.jobs.models import PipelineCursor
from app.memories.models import Memory


def lock_cursor(db: Session, org_id: uuid.UUID, pipeline: str) -> PipelineCursor:
    db.execute(insert(PipelineCursor).values(org_id=org_id, pipeline=pipeline, position={})
               .on_conflict_do_nothing())
    return db.execute(select(PipelineCursor).where(PipelineCursor.org_id == org_id, PipelineCursor.pipeline == pipeline)
                      .with_for_update()).scalar_one()


def episodes_after(db: Session, org_id: uuid.UUID, position: dict, before: datetime, limit: int) -> list[Episode]:
    conds = [Episode.org_id == org_id, Episode.created_at < before]
    if position.get("at"):
        at, id_ = datetime.fromisoformat(position["at"]), uuid.UUID(position["id"])
        conds.append(tuple_(Episode.created_at, Episode.id) > tuple_(at, id_))
    return list(db.execute(select(Episode).where(*conds).order_by(Episode.created_at, Episode.id).limit(limit)).scalars())


def count_episodes_after(db: Session, org_id: uuid.UUID, position: dict, before: datetime) -> int:
    from sqlalchemy import func

    conds = [Episode.org_id == org_id, Episode.created_at < before]
    if position.get("at"):
        at, id_ = datetime.fromisoformat(position["at"]), uuid.UUID(position["id"])
        conds.append(tuple_(Episode.created_at, Episode.id) > tuple_(at, id_))
    return db.execute(select(func.count()).select_from(Episode).where(*conds)).scalar_one()


def same_scope(owner_id: uuid.UUID, visibility: str, groups: list[str], labels: list[str]):  # noqa: ANN201
    return and_(Memory.owner_id == owner_id, Memory.visibility == visibility, Memory.groups == sorted(groups),
                Memory.labels == sorted(labels))


def nearest_active(db: Session, org_id: uuid.UUID, scope_cond, vec, text: str) -> tuple[Memory, float] | None:  # noqa: ANN001
    """The closest active memory in the same scope (exact: the scope filter is selective)."""
    dist = Memory.embedding.cosine_distance(vec)
    same_text = Memory.text.ilike(text.strip())
    row = db.execute(select(Memory, dist.label("d")).where(Memory.org_id == org_id, Memory.status == "active", scope_cond)
                     .order_by(same_text.desc(), dist + 0).limit(1).with_for_update()).first()
    return (row[0], float(row[1])) if row else None


def active_memories(db: Session, org_id: uuid.UUID) -> list[Memory]:
    return list(db.execute(select(Memory).where(Memory.org_id == org_id, Memory.status.in_(("active", "quarantined")))
                           .order_by(Memory.recorded_at)).scalars())


def set_quality(db: Session, episode_id: uuid.UUID, quality: str) -> None:
    db.execute(update(Episode).where(Episode.id == episode_id).values(quality=quality))
