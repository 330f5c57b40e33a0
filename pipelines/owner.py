"""Who owns what a pipeline writes when no user asked for it (scheduled or CLI runs)."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.orgs.models import User


def job_owner(db: Session, org_id: uuid.UUID, created_by: uuid.UUID | None) -> uuid.UUID:
    if created_by is not None:
        return created_by
    users = list(db.execute(select(User).where(User.org_id == org_id).order_by(User.created_at)).scalars())
    for role in ("admin", "steward"):
        for u in users:
            if role in u.roles:
                return u.id
    if not users:
        raise RuntimeError("the org has no users to own pipeline output")
    return users[0].id
