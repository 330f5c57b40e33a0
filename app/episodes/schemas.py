from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.kit.http.schemas import AccessIn, AccessOut, Instant, StrictModel


class Message(StrictModel):
    role: str = Field(min_length=1, max_length=32)
    content: str = Field(max_length=100_000)
    at: Instant | None = None


class EpisodeIn(AccessIn):
    kind: Literal["conversation", "trajectory", "feedback", "note"]
    content: str = Field(min_length=1, max_length=100_000)
    messages: list[Message] | None = Field(default=None, max_length=1000)
    session_id: str | None = Field(default=None, min_length=1, max_length=200)
    outcome: Literal["success", "failure", "unknown"] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    occurred_at: Instant | None = None


class EpisodeBatchIn(StrictModel):
    items: list[EpisodeIn] = Field(min_length=1)


class EpisodeOut(AccessOut):
    id: uuid.UUID
    kind: str
    content: str
    messages: list[dict] | None
    session_id: str | None
    outcome: str | None
    metadata: dict[str, Any]
    occurred_at: datetime
    created_at: datetime
    owner_id: uuid.UUID


class BatchOut(BaseModel):
    ids: list[uuid.UUID]


class EpisodePage(StrictModel):
    """A keyset page: pass `next_cursor` as `cursor` for the next one (null: this was the last)."""

    items: list[EpisodeOut]
    next_cursor: str | None = None
