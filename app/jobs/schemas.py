from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel


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
