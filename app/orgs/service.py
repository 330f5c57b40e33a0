"""Orgs, users and keys (operator actions; run with the owner connection from the CLI)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import new_key
from app.kit.errors import Conflict, NotFound
from app.orgs.models import ApiKey, Org, User

ROLES = ("member", "steward", "auditor", "admin")


def create_org(db: Session, name: str) -> Org:
    org = Org(name=name)
    db.add(org)
    try:
        with db.begin_nested():
            db.flush()
    except IntegrityError:
        raise Conflict(f"org {name!r} already exists") from None
    record(db, org_id=org.id, actor_id=None, action="org.create", target_type="org", target_id=org.id)
    return org


def org_by_name(db: Session, name: str) -> Org:
    org = db.execute(select(Org).where(Org.name == name)).scalar_one_or_none()
    if org is None:
        raise NotFound(f"no org {name!r}")
    return org


def create_user(db: Session, org: Org, name: str, *, roles=(), groups=(), clearances=()) -> User:  # noqa: ANN001
    u = User(org_id=org.id, name=name, roles=sorted(set(roles or ("member",))), groups=sorted(set(groups)),
             clearances=sorted(set(clearances)))
    db.add(u)
    try:
        with db.begin_nested():
            db.flush()
    except IntegrityError:
        raise Conflict(f"user {name!r} already exists in {org.name!r}") from None
    record(db, org_id=org.id, actor_id=None, action="user.create", target_type="user", target_id=u.id,
           details={"roles": u.roles, "groups": u.groups, "clearances": u.clearances})
    return u


def user_by_name(db: Session, org: Org, name: str) -> User:
    u = db.execute(select(User).where(User.org_id == org.id, User.name == name)).scalar_one_or_none()
    if u is None:
        raise NotFound(f"no user {name!r} in {org.name!r}")
    return u


def create_key(db: Session, user: User) -> str:
    """Return the key; only its salted HMAC is stored, so it can be shown this once."""
    key_id, key, salt, digest = new_key()
    db.add(ApiKey(id=key_id, org_id=user.org_id, user_id=user.id, salt=salt, secret_hash=digest))
    db.flush()
    record(db, org_id=user.org_id, actor_id=None, action="key.create", target_type="user", target_id=user.id,
           details={"key_id": str(key_id)})
    return key
