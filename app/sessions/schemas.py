from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints

from app.kit.schemas import StrictModel

Label = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\- ]+$")]
BlockText = Annotated[str, StringConstraints(max_length=4000)]


class SessionIn(StrictModel):
    budget_tokens: int = Field(default=4000, ge=256, le=128_000)
    working_context: dict[Label, BlockText] = Field(default_factory=dict, max_length=10)


class SessionOut(BaseModel):
    id: uuid.UUID
    budget_tokens: int
    working_context: dict[str, str]
    summary: str | None
    evictions: int
    outcome: str | None
    reward: float | None
    created_at: datetime


class MessageIn(StrictModel):
    role: Literal["user", "assistant", "tool"]
    content: str = Field(min_length=1, max_length=100_000)


class MessageOut(BaseModel):
    id: uuid.UUID
    seq: int
    role: str
    content: str
    tokens: int
    evicted: int = 0
    pressure: float


class OutcomeIn(StrictModel):
    outcome: Literal["success", "failure", "unknown"]
    reward: float | None = Field(default=None, ge=-1e6, le=1e6)
    note: str | None = Field(default=None, max_length=2000)


class ContextIn(StrictModel):
    query: str = Field(min_length=1, max_length=2000)
    session_id: uuid.UUID | None = None
    budget_tokens: int = Field(default=2000, ge=64, le=128_000)
