from __future__ import annotations

import uuid

from fastapi import APIRouter, Query

from app.audit import service
from app.audit.schemas import AuditPage
from app.kit.http.deps import SessionDep, require
from app.kit.errors import COMMON_ERRORS
from app.kit.http.schemas import Instant

router = APIRouter(prefix="/v1", tags=["compliance"], responses=COMMON_ERRORS)


@router.get("/audit", response_model=AuditPage)
def audit(db: SessionDep, actor: uuid.UUID | None = None, action: str | None = Query(default=None, max_length=100),
          target_type: str | None = Query(default=None, max_length=50),
          target_id: str | None = Query(default=None, max_length=100), since: Instant | None = None,
          until: Instant | None = None,
          cursor: str | None = Query(default=None, max_length=20, pattern=r"^[0-9]+$"),
          limit: int = Query(default=100, ge=1, le=1000), principal=require("audit", "read")):
    return service.events(db, principal, actor=actor, action=action, target_type=target_type, target_id=target_id,
                          since=since, until=until, cursor=cursor, limit=limit)
