from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from app.kit.schemas import AccessIn, AccessOut, IsoDateTime, NumberOnly, StrictModel, Tag, Visibility

MemoryKind = Literal["fact", "rule", "preference", "procedure", "schema_hint"]


class SourceRef(StrictModel):
    type: Literal["episode", "memory", "chunk", "asset"]
    id: uuid.UUID


class MemoryIn(AccessIn):
    text: str = Field(min_length=1, max_length=20_000)
    kind: MemoryKind
    confidence: Annotated[float, Field(ge=0.0, le=1.0), NumberOnly] = 0.8
    sources: list[SourceRef] = Field(default_factory=list, max_length=100)
    valid_from: IsoDateTime | None = None


class MemoryPatch(StrictModel):
    text: str | None = Field(default=None, min_length=1, max_length=20_000)
    kind: MemoryKind | None = None
    confidence: Annotated[float, Field(ge=0.0, le=1.0), NumberOnly] | None = None
    visibility: Visibility | None = None
    groups: list[Tag] | None = Field(default=None, max_length=32)
    labels: list[Tag] | None = Field(default=None, max_length=32)


class MemoryOut(AccessOut):
    id: uuid.UUID
    root_id: uuid.UUID
    version: int
    status: str
    text: str
    kind: str
    confidence: float
    provenance: dict
    owner_id: uuid.UUID
    valid_from: datetime
    valid_to: datetime | None
    recorded_at: datetime
    superseded_at: datetime | None
    last_validated_at: datetime


class DeclassifyIn(AccessIn):
    reason: str = Field(min_length=3, max_length=2000)
