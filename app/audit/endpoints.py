from __future__ import annotations

import uuid

from fastapi import APIRouter, Query

from app.audit import service
from app.audit.schemas import AuditPage, VerifyIn, VerifyOut
from app.kit.errors import COMMON_ERRORS
from app.kit.http.deps import SessionDep, require
from app.kit.http.schemas import Instant

router = APIRouter(prefix="/v1", tags=["compliance"], responses=COMMON_ERRORS)


@router.get("/audit", response_model=AuditPage)
def audit(
    db: SessionDep,
    actor: uuid.UUID | None = None,
    action: str | None = Query(default=None, max_length=100),
    target_type: str | None = Query(default=None, max_length=50),
    target_id: str | None = Query(default=None, max_length=100),
    since: Instant | None = None,
    until: Instant | None = None,
    cursor: str | None = Query(default=None, max_length=20, pattern=r"^[0-9]+$"),
    limit: int = Query(default=100, ge=1, le=1000),
    principal=require("audit", "read"),
):
    return service.events(
        db,
        principal,
        actor=actor,
        action=action,
        target_type=target_type,
        target_id=target_id,
        since=since,
        until=until,
        cursor=cursor,
        limit=limit,
    )


@router.post("/audit/verify", response_model=VerifyOut)
def verify(db: SessionDep, body: VerifyIn | None = None, principal=require("audit", "verify")):
    """`memscale audit verify` for the caller's org, a window at a time: each event's hash recomputed
    and chained, its seal checked with the service's key, and (optional) the chain still passing
    through a signed `checkpoint`. `first_broken`: the first event that fails, and why."""
    body = body or VerifyIn()
    return service.verify(
        db,
        principal,
        since_seq=body.since_seq,
        limit=body.limit,
        checkpoint_=body.checkpoint.model_dump() if body.checkpoint else None,
    )
