from __future__ import annotations

import uuid

from fastapi import APIRouter, Query
from sqlalchemy import select

from app.audit.models import AuditEvent
from app.kit.access import in_org
from app.kit.deps import SessionDep, require
from app.kit.errors import COMMON_ERRORS, BadRequest
from app.kit.schemas import IsoDateTime

router = APIRouter(prefix="/v1", tags=["compliance"], responses=COMMON_ERRORS)


@router.get("/audit")
def audit(db: SessionDep, actor: uuid.UUID | None = None, action: str | None = Query(default=None, max_length=100),
          target_type: str | None = Query(default=None, max_length=50),
          target_id: str | None = Query(default=None, max_length=100), since: IsoDateTime | None = None,
          until: IsoDateTime | None = None,
          cursor: str | None = Query(default=None, max_length=20, pattern=r"^[0-9]+$"),
          limit: int = Query(default=100, ge=1, le=1000), principal=require("audit", "read")) -> dict:
    stmt = select(AuditEvent).where(in_org(principal, AuditEvent))
    if actor:
        stmt = stmt.where(AuditEvent.actor_id == actor)
    if action:
        stmt = stmt.where(AuditEvent.action.startswith(action, autoescape=True) if action.endswith(".")
                          else AuditEvent.action == action)
    if target_type:
        stmt = stmt.where(AuditEvent.target_type == target_type)
    if target_id:
        stmt = stmt.where(AuditEvent.target_id == target_id)
    if since:
        stmt = stmt.where(AuditEvent.at >= since)
    if until:
        stmt = stmt.where(AuditEvent.at < until)
    if cursor:
        if not cursor.isdigit():
            raise BadRequest("cursor must be the next_cursor of a previous page", code="invalid_cursor")
        stmt = stmt.where(AuditEvent.seq > int(cursor))
    rows = list(db.execute(stmt.order_by(AuditEvent.seq).limit(limit + 1)).scalars())
    more = len(rows) > limit
    rows = rows[:limit]
    return {"events": [{"seq": e.seq, "at": e.at.isoformat(), "actor": str(e.actor_id) if e.actor_id else None,
                        "action": e.action, "target_type": e.target_type, "target_id": e.target_id,
                        "details": e.details, "prev_hash": e.prev_hash, "hash": e.hash} for e in rows],
            "next_cursor": str(rows[-1].seq) if more and rows else None}
