"""Statements over the memory manager's decisions and policies (org-level row-level security
beneath each), and the one read of feedback events a reward needs."""

from __future__ import annotations

import uuid

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from app.feedback.models import FeedbackEvent
from app.manager.models import ManagerDecision, ManagerPolicy


def add_decision(db: Session, **values) -> None:
    db.add(ManagerDecision(**values))


def decisions(db: Session, org_id: uuid.UUID, limit: int) -> list[ManagerDecision]:
    """The org's most recent decisions that produced or kept a memory."""
    return list(
        db.execute(
            select(ManagerDecision)
            .where(ManagerDecision.org_id == org_id, ManagerDecision.memory_id.is_not(None))
            .order_by(ManagerDecision.at.desc(), ManagerDecision.id)
            .limit(limit)
        ).scalars()
    )


def used_with_success(db: Session, org_id: uuid.UUID, memory_ids: set[str]) -> dict[str, int]:
    """{memory id: distinct users who marked it `used` in a retrieval whose outcome was success}."""
    rows = db.execute(
        select(FeedbackEvent.actor_id, FeedbackEvent.items).where(
            FeedbackEvent.org_id == org_id, FeedbackEvent.outcome == "success"
        )
    ).all()
    users: dict[str, set] = {}
    for actor, items in rows:
        for it in items:
            if it.get("type") == "memory" and it.get("signal") == "used" and it.get("id") in memory_ids:
                users.setdefault(it["id"], set()).add(actor)
    return {m: len(u) for m, u in users.items()}


def active_policy(db: Session, org_id: uuid.UUID) -> ManagerPolicy | None:
    return db.execute(
        select(ManagerPolicy)
        .where(ManagerPolicy.org_id == org_id, ManagerPolicy.status == "active")
        .order_by(ManagerPolicy.version.desc())
        .limit(1)
    ).scalar_one_or_none()


def next_version(db: Session, org_id: uuid.UUID) -> int:
    top = db.execute(select(func.max(ManagerPolicy.version)).where(ManagerPolicy.org_id == org_id)).scalar()
    return (top or 0) + 1


def add_policy(db: Session, **values) -> ManagerPolicy:
    p = ManagerPolicy(**values)
    db.add(p)
    db.flush()
    return p


def set_status(db: Session, org_id: uuid.UUID, *, was: str, now: str, before_version: int | None = None) -> int:
    """Every policy of the org in status `was` (below `before_version` if given) set to `now`; how many."""
    q = update(ManagerPolicy).where(ManagerPolicy.org_id == org_id, ManagerPolicy.status == was)
    if before_version is not None:
        q = q.where(ManagerPolicy.version < before_version)
    return db.execute(q.values(status=now).returning(ManagerPolicy.id)).all().__len__()


def policies(db: Session, org_id: uuid.UUID) -> list[ManagerPolicy]:
    return list(db.execute(select(ManagerPolicy).where(ManagerPolicy.org_id == org_id).order_by(ManagerPolicy.version)).scalars())


def delete_owned_by(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID) -> int:
    got = db.execute(
        delete(ManagerDecision)
        .where(ManagerDecision.org_id == org_id, ManagerDecision.owner_id == owner_id)
        .returning(ManagerDecision.id)
    ).all()
    return len(got)
