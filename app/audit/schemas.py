from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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


class Checkpoint(BaseModel):
    """A line of `memscale audit checkpoint`: the chain's head, signed with the service's key."""

    model_config = ConfigDict(extra="forbid")
    org: str = Field(max_length=36)
    seq: int = Field(ge=0)
    hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    signature: str = Field(pattern=r"^[0-9a-f]{1,128}$")


class VerifyIn(BaseModel):
    """A window of the chain: `limit` events from `since_seq` (the first window: 1; the next: `to_seq` + 1)."""

    model_config = ConfigDict(extra="forbid")
    since_seq: int = Field(default=1, ge=1)
    limit: int = Field(default=10_000, ge=1, le=100_000)
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
