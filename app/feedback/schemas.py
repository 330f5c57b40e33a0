"""Request and response bodies of POST /v1/feedback, and a memory's utility as GET shows it."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, Field

from app.kit.http.schemas import StrictModel
from app.kit.items import ItemName

Signal = Literal["used", "helpful", "wrong", "outdated"]
Outcome = Literal["success", "failure", "unknown"]


class FeedbackItem(StrictModel):
    type: ItemName
    id: uuid.UUID
    signal: Signal


class FeedbackIn(StrictModel):
    retrieval_id: uuid.UUID
    items: list[FeedbackItem] = Field(min_length=1, max_length=100)
    outcome: Outcome | None = None


class FeedbackOut(BaseModel):
    id: uuid.UUID


class Utility(BaseModel):
    """Decayed counts of distinct users who found the memory helpful / wrong, and the posterior
    mean of a Beta(1, 1) prior over them: the chance it helps when handed out."""

    helpful: float
    wrong: float
    estimate: float
