"""Statements over orgs, users and API keys."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from app.orgs.models import ApiKey, Org, User


def org_by_name(db: Session, name: str) -> Org | None:
    return db.execute(select(Org).where(Org.name == name)).scalar_one_or_none()


def user_by_name(db: Session, org_id: uuid.UUID, name: str) -> User | None:
    return db.execute(select(User).where(User.org_id == org_id, User.name == name)).scalar_one_or_none()


def user_in_org(db: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> User | None:
    return db.execute(select(User).where(User.id == user_id, User.org_id == org_id)).scalar_one_or_none()


def users_by_age(db: Session, org_id: uuid.UUID) -> list[User]:
    return list(db.execute(select(User).where(User.org_id == org_id).order_by(User.created_at)).scalars())


def key_principal(db: Session, key_id: uuid.UUID):
    """(org_id, user_id, salt, secret_hash, name, roles, groups, clearances) of a live key and its
    user, or None. Through a SECURITY DEFINER function (migration 0017): before the key is checked
    no org is bound, and RLS hides every key and user."""
    return db.execute(
        text("SELECT org_id, user_id, salt, secret_hash, name, roles, groups, clearances FROM memscale_key_principal(:id)"),
        {"id": key_id},
    ).first()


def revoke_keys(db: Session, org_id: uuid.UUID, user_id: uuid.UUID, at: datetime) -> int:
    return db.execute(
        update(ApiKey)
        .where(ApiKey.org_id == org_id, ApiKey.user_id == user_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=at)
    ).rowcount
