"""Statements over the audit log. Appends are serialised per org by a transaction-scoped advisory
lock, so two writers never read the same chain head (the chain has no forks)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth.principal import Principal
from app.kit.tenancy.access import in_org


def lock_chain(db: Session, org_id: uuid.UUID) -> None:
    """Hold the org's append lock until the transaction ends."""
    db.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 7))"), {"k": f"audit:{org_id}"})


def head(db: Session, org_id: uuid.UUID):
    """(seq, hash) of the org's last event, or None."""
    return db.execute(
        select(AuditEvent.seq, AuditEvent.hash).where(AuditEvent.org_id == org_id).order_by(AuditEvent.seq.desc()).limit(1)
    ).first()


def chain(db: Session, org_id: uuid.UUID, *, since_seq: int = 1, limit: int | None = None):
    """The org's events from `since_seq` on in chain order (up to `limit`; streamed)."""
    stmt = select(AuditEvent).where(AuditEvent.org_id == org_id, AuditEvent.seq >= since_seq).order_by(AuditEvent.seq)
    return db.execute(stmt.limit(limit) if limit else stmt).scalars()


def sealed_before(db: Session, org_id: uuid.UUID, seq: int) -> bool:
    """Whether an event before `seq` carries a seal."""
    return (
        db.execute(
            select(AuditEvent.seq).where(AuditEvent.org_id == org_id, AuditEvent.seq < seq, AuditEvent.mac.is_not(None)).limit(1)
        ).first()
        is not None
    )


def hash_at(db: Session, org_id: uuid.UUID, seq: int) -> str | None:
    return db.execute(select(AuditEvent.hash).where(AuditEvent.org_id == org_id, AuditEvent.seq == seq)).scalar()


def page(
    db: Session,
    principal: Principal,
    *,
    actor: uuid.UUID | None,
    action: str | None,
    target_type: str | None,
    target_id: str | None,
    since: datetime | None,
    until: datetime | None,
    after_seq: int | None,
    limit: int,
) -> list[AuditEvent]:
    """Up to `limit` events of the caller's org after `after_seq`, filtered; an `action` ending in "." is a prefix."""
    stmt = select(AuditEvent).where(in_org(principal, AuditEvent))
    if actor:
        stmt = stmt.where(AuditEvent.actor_id == actor)
    if action:
        stmt = stmt.where(
            AuditEvent.action.startswith(action, autoescape=True) if action.endswith(".") else AuditEvent.action == action
        )
    if target_type:
        stmt = stmt.where(AuditEvent.target_type == target_type)
    if target_id:
        stmt = stmt.where(AuditEvent.target_id == target_id)
    if since:
        stmt = stmt.where(AuditEvent.at >= since)
    if until:
        stmt = stmt.where(AuditEvent.at < until)
    if after_seq is not None:
        stmt = stmt.where(AuditEvent.seq > after_seq)
    return list(db.execute(stmt.order_by(AuditEvent.seq).limit(limit)).scalars())
