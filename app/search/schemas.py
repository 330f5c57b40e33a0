from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from app.kit.schemas import IsoDateTime, NumberOnly, StrictModel, Tag

ItemType = Literal["memory", "episode", "chunk"]


class SearchFilters(StrictModel):
    kinds: list[str] | None = Field(default=None, max_length=16)
    labels: list[Tag] | None = Field(default=None, max_length=32)
    since: IsoDateTime | None = None
    until: IsoDateTime | None = None
    session_id: str | None = Field(default=None, max_length=200)


class SearchIn(StrictModel):
    query: str = Field(min_length=1, max_length=2000)
    types: list[ItemType] = Field(default_factory=lambda: ["memory", "episode", "chunk"], min_length=1)
    k: Annotated[int, Field(ge=1, le=100), NumberOnly] = 10
    mode: Literal["hybrid", "vector", "text"] = "hybrid"
    filters: SearchFilters = Field(default_factory=SearchFilters)


class SearchResult(BaseModel):
    type: ItemType
    id: uuid.UUID
    text: str
    score: float
    visibility: str
    labels: list[str]
    groups: list[str]
    created_at: datetime
    kind: str | None = None
    owner_id: uuid.UUID
    confidence: float | None = None
    session_id: str | None = None
    content_hash: str | None = None
    outcome: str | None = None
    occurred_at: datetime | None = None  # episodes: when it happened (created_at is when it was stored)


class SearchOut(BaseModel):
    results: list[SearchResult]
    retrieval_id: uuid.UUID
