"""Idempotency-Key: the same key and body return the first result; another body is a 409."""

from __future__ import annotations

import hashlib
import json

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.errors import BadRequest, Conflict
from app.orgs.models import IdempotencyRecord


def body_hash(payload) -> str:  # noqa: ANN001
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def replay(db: Session, principal: Principal, key: str | None, endpoint: str, digest: str) -> dict | None:
    """Return the stored response for this key, or None (and hold a lock until commit)."""
    if key is None:
        return None
    if not 1 <= len(key) <= 200:
        raise BadRequest("Idempotency-Key must be 1-200 characters", code="invalid_idempotency_key")
    # Serialise concurrent requests with the same key: the second waits and then replays.
    db.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 11))"),
               {"k": f"{principal.user_id}:{endpoint}:{key}"})
    rec = db.execute(select(IdempotencyRecord).where(
        IdempotencyRecord.org_id == principal.org_id, IdempotencyRecord.user_id == principal.user_id,
        IdempotencyRecord.key == key, IdempotencyRecord.endpoint == endpoint)).scalar_one_or_none()
    if rec is None:
        return None
    if rec.request_hash != digest:
        raise Conflict("Idempotency-Key was already used with a different body", code="idempotency_key_reused")
    return rec.response


def remember(db: Session, principal: Principal, key: str | None, endpoint: str, digest: str,
             status_code: int, response: dict) -> None:
    if key is None:
        return
    db.add(IdempotencyRecord(org_id=principal.org_id, user_id=principal.user_id, key=key, endpoint=endpoint,
                             request_hash=digest, status_code=status_code,
                             response=json.loads(json.dumps(response, default=str))))
    db.flush()
