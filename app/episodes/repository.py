from __future__ import annotations

import uuid

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.episodes.models import Episode
from app.kit.access import visible_to


def get_visible(db: Session, principal: Principal, episode_id: uuid.UUID) -> Episode | None:
    return db.execute(select(Episode).where(Episode.id == episode_id, visible_to(principal, Episode))).scalar_one_or_none()


def add_all(db: Session, episodes: list[Episode]) -> None:
    db.add_all(episodes)
    db.flush()


def hard_delete(db: Session, episode_id: uuid.UUID) -> None:
    db.execute(delete(Episode).where(Episode.id == episode_id))


def sessions_not_owned_by(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID, ids: set[uuid.UUID]) -> list[uuid.UUID]:
    """Which of these ids are sessions of the org owned by someone else (ids only; sessions are
    private, so the check looks past the caller's row-level scope)."""
    from app.kit.db import every_scope
    from app.sessions.models import AgentSession

    with every_scope(db):
        return list(db.execute(select(AgentSession.id).where(
            AgentSession.org_id == org_id, AgentSession.id.in_(ids), AgentSession.owner_id != owner_id)).scalars())
