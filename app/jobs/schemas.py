from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.kit.schemas import StrictModel


class JobIn(StrictModel):
    kind: Literal["bootstrap", "distill", "consolidate", "train_cartridge", "retention"]
    params: dict[str, Any] = Field(default_factory=dict)


class JobCreated(BaseModel):
    id: uuid.UUID


class JobOut(BaseModel):
    id: uuid.UUID
    kind: str
    status: str
    progress: float
    stats: dict
    error: str | None = None
    params: dict
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
