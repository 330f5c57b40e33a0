from __future__ import annotations

from pydantic import BaseModel


class RetentionRule(BaseModel):
    item_type: str
    days: float
    cutoff: str  # items from before this instant are removed
    due: int | None  # how many the next run would remove (None: a type no retention run removes)


class RetentionOut(BaseModel):
    rules: list[RetentionRule]
    at: str  # the instant the cutoffs and counts are taken at
