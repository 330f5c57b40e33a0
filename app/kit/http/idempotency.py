"""Idempotency-Key: the same key and body return the first result; another body is a 409. HTTP
plumbing that any endpoint may use; its table is `idempotency_keys` (idempotency_models.py).

Stored replies hold content (an episode's text), so they follow the data's life: they expire
after `ttl_s` (24 h by default: a client retries within minutes, not days), expired rows of the
org are purged whenever a new reply is stored, and deleting an episode or forgetting a user
drops every reply that names them (`forget_replies`, `forget_user_replies`).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.errors import BadRequest, Conflict
from app.kit.http import repository_idempotency as repo
from app.kit.http.idempotency_models import IdempotencyRecord

DEFAULT_TTL_S = 24 * 3600


def body_hash(payload) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def replay(
    db: Session, principal: Principal, key: str | None, endpoint: str, digest: str, ttl_s: int = DEFAULT_TTL_S
) -> dict | None:
    """Return the stored response for this key, or None (and hold a lock until commit)."""
    if key is None:
        return None
    if not 1 <= len(key) <= 200:
        raise BadRequest("Idempotency-Key must be 1-200 characters", code="invalid_idempotency_key")
    # Serialise concurrent requests with the same key: the second waits and then replays.
    repo.lock_key(db, f"{principal.user_id}:{endpoint}:{key}")
    rec = repo.reply(db, principal.org_id, principal.user_id, key, endpoint)
    if rec is None:
        return None
    if rec.created_at < datetime.now(UTC) - timedelta(seconds=ttl_s):
        repo.delete_reply(db, rec)  # expired: the key is free again
        return None
    if rec.request_hash != digest:
        raise Conflict("Idempotency-Key was already used with a different body", code="idempotency_key_reused")
    return rec.response


def remember(
    db: Session,
    principal: Principal,
    key: str | None,
    endpoint: str,
    digest: str,
    status_code: int,
    *,
    response: dict,
    ttl_s: int = DEFAULT_TTL_S,
) -> None:
    if key is None:
        return
    purge_expired(db, principal.org_id, ttl_s)
    repo.add_reply(
        db,
        IdempotencyRecord(
            org_id=principal.org_id,
            user_id=principal.user_id,
            key=key,
            endpoint=endpoint,
            request_hash=digest,
            status_code=status_code,
            response=json.loads(json.dumps(response, default=str)),
        ),
    )


def idempotent(
    db: Session,
    principal: Principal,
    key: str | None,
    endpoint: str,
    body: BaseModel,
    make: Callable[[], BaseModel],
    *,
    status_code: int = 201,
    ttl_s: int = DEFAULT_TTL_S,
):
    """The whole sequence for one endpoint: replay a stored reply, or make the result and store it.
    A key is per branch (app/kit/tenancy/view.py): the same request in main and in a branch are two writes."""
    if principal.view.branch_id is not None:
        endpoint = f"{endpoint}@{principal.view.branch_id}"
    digest = body_hash(body.model_dump(mode="json"))
    prior = replay(db, principal, key, endpoint, digest, ttl_s)
    if prior is not None:
        return JSONResponse(prior, status_code=status_code)
    out = make()
    remember(db, principal, key, endpoint, digest, status_code, response=out.model_dump(mode="json"), ttl_s=ttl_s)
    return out


def purge_expired(db: Session, org_id: uuid.UUID, ttl_s: int = DEFAULT_TTL_S) -> int:
    return repo.delete_replies_before(db, org_id, datetime.now(UTC) - timedelta(seconds=ttl_s))


def forget_replies(db: Session, org_id: uuid.UUID, item_ids: list[uuid.UUID]) -> int:
    """Drop stored replies that name any of these items (`{"id": ...}` or `{"ids": [...]}`)."""
    if not item_ids:
        return 0
    return repo.delete_replies_naming(db, org_id, [str(i) for i in item_ids])


def forget_user_replies(db: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> int:
    return repo.delete_replies_of(db, org_id, user_id)
