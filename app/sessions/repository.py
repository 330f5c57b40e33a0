"""Statements over agent sessions, their message FIFO and their tool-call trajectories."""

from __future__ import annotations

import uuid

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.tenancy.access import visible_to
from app.sessions.models import AgentSession, SessionMessage, ToolCall


def get_visible(db: Session, principal: Principal, session_id: uuid.UUID, *, for_update: bool = False) -> AgentSession | None:
    stmt = select(AgentSession).where(AgentSession.id == session_id, visible_to(principal, AgentSession))
    return db.execute(stmt.with_for_update() if for_update else stmt).scalar_one_or_none()


def messages(db: Session, org_id: uuid.UUID, session_id: uuid.UUID) -> list[SessionMessage]:
    return list(
        db.execute(
            select(SessionMessage)
            .where(SessionMessage.org_id == org_id, SessionMessage.session_id == session_id)
            .order_by(SessionMessage.seq)
        ).scalars()
    )


def delete_messages(db: Session, org_id: uuid.UUID, ids: list[uuid.UUID]) -> None:
    db.execute(delete(SessionMessage).where(SessionMessage.org_id == org_id, SessionMessage.id.in_(ids)))


def next_tool_seq(db: Session, org_id: uuid.UUID, session_id: uuid.UUID) -> int:
    return (
        db.execute(
            select(func.coalesce(func.max(ToolCall.seq), 0)).where(ToolCall.org_id == org_id, ToolCall.session_id == session_id)
        ).scalar()
        or 0
    ) + 1


def sessions_of_org(db: Session, org_id: uuid.UUID):
    """Every session of the org, oldest first (streamed; the export binds every scope)."""
    return db.execute(select(AgentSession).where(AgentSession.org_id == org_id).order_by(AgentSession.created_at)).scalars()


def tool_calls(db: Session, org_id: uuid.UUID, session_id: uuid.UUID) -> list[ToolCall]:
    return list(
        db.execute(
            select(ToolCall).where(ToolCall.org_id == org_id, ToolCall.session_id == session_id).order_by(ToolCall.seq)
        ).scalars()
    )


def delete_owned_by(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID) -> int:
    return len(
        db.execute(
            delete(AgentSession)
            .where(AgentSession.org_id == org_id, AgentSession.owner_id == owner_id)
            .returning(AgentSession.id)
        ).all()
    )
