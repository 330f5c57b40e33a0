from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class AuditEventOut(BaseModel):
    seq: int
    at: str
    actor: str | None
    action: str
    target_type: str | None
    target_id: str | None
    details: dict[str, Any]
    prev_hash: str
    hash: str


class AuditPage(BaseModel):
    events: list[AuditEventOut]
    next_cursor: str | None
