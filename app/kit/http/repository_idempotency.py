"""Statements over stored Idempotency-Key replies (app/kit/http/idempotency.py)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import delete, or_, select, text
from sqlalchemy.orm import Session

from app.kit.http.idempotency_models import IdempotencyRecord


def lock_key(db: Session, lock_key: str) -> None:
    """Serialise requests with the same key until the transaction ends."""
    db.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 11))"), {"k": lock_key})


def reply(db: Session, org_id: uuid.UUID, user_id: uuid.UUID, key: str, endpoint: str) -> IdempotencyRecord | None:
    return db.execute(
        select(IdempotencyRecord).where(
            IdempotencyRecord.org_id == org_id,
            IdempotencyRecord.user_id == user_id,
            IdempotencyRecord.key == key,
            IdempotencyRecord.endpoint == endpoint,
        )
    ).scalar_one_or_none()


def delete_reply(db: Session, rec: IdempotencyRecord) -> None:
    db.delete(rec)
    db.flush()


def add_reply(db: Session, rec: IdempotencyRecord) -> None:
    db.add(rec)
    db.flush()


def delete_replies_before(db: Session, org_id: uuid.UUID, cutoff: datetime) -> int:
    return db.execute(
        delete(IdempotencyRecord).where(IdempotencyRecord.org_id == org_id, IdempotencyRecord.created_at < cutoff)
    ).rowcount


def delete_replies_naming(db: Session, org_id: uuid.UUID, ids: list[str]) -> int:
    """Replies that name any of these ids (`{"id": ...}` or `{"ids": [...]}`)."""
    resp = IdempotencyRecord.response
    names = or_(resp["id"].astext.in_(ids), *[resp["ids"].contains([i]) for i in ids])
    return db.execute(delete(IdempotencyRecord).where(IdempotencyRecord.org_id == org_id, names)).rowcount


def delete_replies_of(db: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> int:
    return db.execute(
        delete(IdempotencyRecord).where(IdempotencyRecord.org_id == org_id, IdempotencyRecord.user_id == user_id)
    ).rowcount
