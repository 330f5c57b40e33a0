from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StrictBool

from app.kit.http.schemas import Instant, NumberOnly, StrictModel, Tag
from app.kit.items import SEARCH_TYPES, SearchType
from app.knowledge.kinds import ASSET_KINDS, AssetKind

ItemType = SearchType


class SearchFilters(StrictModel):
    """Every field narrows what `visible_to` already allows (ANDed with it, never ORed)."""

    kinds: list[str] | None = Field(default=None, max_length=16)
    labels: list[Tag] | None = Field(default=None, max_length=32)
    since: Instant | None = None
    until: Instant | None = None
    session_id: str | None = Field(default=None, max_length=200)
    # what an `instruction` can set too (instructed retrieval)
    exclude_kinds: list[str] | None = Field(default=None, max_length=16)
    exclude_labels: list[Tag] | None = Field(default=None, max_length=32)
    owner: Literal["me"] | None = None  # only the caller's own items
    visibility: list[Literal["private", "group", "org"]] | None = Field(default=None, max_length=3)
    groups: list[Tag] | None = Field(default=None, max_length=32)  # shared with any of these groups
    asset_kinds: list[AssetKind] | None = Field(default=None, max_length=len(ASSET_KINDS))
    status: list[Literal["active", "superseded"]] | None = Field(default=None, max_length=2)  # memories; default active
    source: list[Literal["api", "distill", "bootstrap"]] | None = Field(default=None, max_length=3)


class Interpreted(BaseModel):
    """What an `instruction` was read as: the filters it set, the query used, what it ignored."""

    filters: dict = Field(default_factory=dict)
    query: str | None = None
    ignored: list[str] = Field(default_factory=list)


class SearchIn(StrictModel):
    query: str = Field(min_length=1, max_length=2000)
    types: list[ItemType] = Field(default_factory=lambda: list(SEARCH_TYPES), min_length=1)
    k: Annotated[int, Field(ge=1, le=100), NumberOnly] = 10
    mode: Literal["hybrid", "vector", "text"] = "hybrid"
    filters: SearchFilters = Field(default_factory=SearchFilters)
    instruction: str | None = Field(default=None, max_length=1000)
    # The memory state as recorded at that instant, under today's access rules.
    as_of: Instant | None = None
    # Each result's score broken down by ranking signal (app/search/signals.py); off by default.
    explain: StrictBool = False  # a JSON boolean only (0 or "true" are refused, as the schema says)


class Explanation(BaseModel):
    """A result's score as the sum of its signals' contributions (`signals` sums to `score`)."""

    signals: dict[str, float]


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
    explain: Explanation | None = None  # only when asked for (left out of the JSON otherwise)


class SearchOut(BaseModel):
    results: list[SearchResult]
    retrieval_id: uuid.UUID
    interpreted: Interpreted | None = None
