"""Orgs, users and keys (operator actions; run with the owner connection from the CLI), and the
look-ups the request path and erasure (app/erasure/) make of them."""

from __future__ import annotations

import hmac
import uuid
from datetime import datetime, timedelta

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal, hash_secret, new_key, parse_key
from app.embedders.models import OrgEmbedder
from app.embedders.service import records_models
from app.kit.database.base import EMBEDDING_DIM
from app.kit.database.db import bind_principal
from app.kit.errors import Conflict, NotFound
from app.orgs import repository as repo
from app.orgs.models import ApiKey, Org, User

ROLES = ("member", "steward", "auditor", "admin")


def create_org(db: Session, name: str, *, embedding_model: str | None = None, embedding_dim: int | None = None) -> Org:
    """A new org; its vectors are recorded as the embedding model's of the process creating it
    (`embedding_model`, default: the configured MEMSCALE_EMBEDDING_MODEL)."""
    if embedding_model is None:
        from app.config import Settings

        s = Settings()
        embedding_model, embedding_dim = s.embedding_model, embedding_dim or s.embedding_dim
    org = Org(name=name)
    db.add(org)
    try:
        with db.begin_nested():
            db.flush()
    except IntegrityError:
        raise Conflict(f"org {name!r} already exists") from None
    if records_models(db):  # a database below revision 0027 records no model (the scale bench's old layouts)
        db.add(OrgEmbedder(org_id=org.id, model=embedding_model, dim=embedding_dim or EMBEDDING_DIM))
        db.flush()
    record(db, org_id=org.id, actor_id=None, action="org.create", target_type="org", target_id=org.id)
    return org


def org_by_name(db: Session, name: str) -> Org:
    org = repo.org_by_name(db, name)
    if org is None:
        raise NotFound(f"no org {name!r}")
    return org


def create_user(db: Session, org: Org, name: str, *, roles=(), groups=(), clearances=()) -> User:
    u = User(
        org_id=org.id,
        name=name,
        roles=sorted(set(roles or ("member",))),
        groups=sorted(set(groups)),
        clearances=sorted(set(clearances)),
    )
    db.add(u)
    try:
        with db.begin_nested():
            db.flush()
    except IntegrityError:
        raise Conflict(f"user {name!r} already exists in {org.name!r}") from None
    record(
        db,
        org_id=org.id,
        actor_id=None,
        action="user.create",
        target_type="user",
        target_id=u.id,
        details={"roles": u.roles, "groups": u.groups, "clearances": u.clearances},
    )
    return u


def user_by_name(db: Session, org: Org, name: str) -> User:
    u = repo.user_by_name(db, org.id, name)
    if u is None:
        raise NotFound(f"no user {name!r} in {org.name!r}")
    return u


def create_key(db: Session, user: User) -> str:
    """Return the key; only its salted HMAC is stored, so it can be shown this once."""
    key_id, key, salt, digest = new_key()
    db.add(ApiKey(id=key_id, org_id=user.org_id, user_id=user.id, salt=salt, secret_hash=digest))
    db.flush()
    record(
        db,
        org_id=user.org_id,
        actor_id=None,
        action="key.create",
        target_type="user",
        target_id=user.id,
        details={"key_id": str(key_id)},
    )
    return key


def resolve_key(db: Session, key: str) -> Principal | None:
    """The principal a bearer key stands for (None: malformed, unknown, revoked or wrong secret);
    binds the transaction's RLS settings to it."""
    parsed = parse_key(key)
    if parsed is None:
        return None
    key_id, secret = parsed
    row = repo.key_principal(db, key_id)  # the key with its user: one statement
    if row is None or not hmac.compare_digest(hash_secret(bytes(row.salt), secret), bytes(row.secret_hash)):
        return None
    p = Principal(
        org_id=row.org_id,
        user_id=row.user_id,
        name=row.name,
        roles=tuple(row.roles),
        groups=tuple(row.groups),
        clearances=tuple(row.clearances),
    )
    bind_principal(db, p)
    return p


def user_name(db: Session, org_id, user_id) -> str:
    u = repo.user_in_org(db, org_id, user_id)
    if u is None:
        raise NotFound("user not found")
    return u.name


def job_owner(db: Session, org_id, created_by):
    """Who owns what a pipeline writes when no user asked for it (scheduled or CLI runs): the
    creator of the job, else the org's first admin, else its first steward, else its first user."""
    if created_by is not None:
        return created_by
    users = repo.users_by_age(db, org_id)
    for role in ("admin", "steward"):
        for u in users:
            if role in u.roles:
                return u.id
    if not users:
        raise RuntimeError("the org has no users to own pipeline output")
    return users[0].id


def retention_rules(db: Session, org_id) -> dict[str, int]:
    """The org's retention policy: days per item type (org.settings.retention, `memscale admin set-retention`)."""
    org = db.get(Org, org_id)
    return dict((org.settings or {}).get("retention", {}))


def retention_days(db: Session, org_id, item_type: str):
    """The org's retention policy for an item type (days), or None."""
    return retention_rules(db, org_id).get(item_type)


def retention_cutoff(days: float, now: datetime) -> datetime:
    """What a retention rule of `days` removes at `now`: the items from before this instant."""
    return now - timedelta(days=float(days))


def user_in_org(db: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> User | None:
    return repo.user_in_org(db, org_id, user_id)


def revoke_keys(db: Session, org_id: uuid.UUID, user_id: uuid.UUID, at: datetime) -> int:
    """Revoke every live key of the user; returns how many."""
    return repo.revoke_keys(db, org_id, user_id, at)
