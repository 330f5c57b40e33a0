from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from app.kit.http.schemas import NumberOnly, StrictModel


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


class Checkpoint(StrictModel):
    """A line of `memscale audit checkpoint`: the chain's head, signed with the service's key."""

    org: str = Field(max_length=36)
    seq: Annotated[int, Field(ge=0), NumberOnly]
    hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    signature: str = Field(pattern=r"^[0-9a-f]{1,128}$")


class VerifyIn(StrictModel):
    """A window of the chain: `limit` events from `since_seq` (the first window: 1; the next: `to_seq` + 1)."""

    since_seq: Annotated[int, Field(ge=1), NumberOnly] = 1
    limit: Annotated[int, Field(ge=1, le=100_000), NumberOnly] = 10_000
    checkpoint: Checkpoint | None = None


class Broken(BaseModel):
    seq: int
    reason: str


class VerifyOut(BaseModel):
    ok: bool
    checked: int
    from_seq: int
    to_seq: int
    head_seq: int
    first_broken: Broken | None = None
