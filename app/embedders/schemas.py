from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class ReembeddingOut(BaseModel):
    model: str = Field(description="the model the org's vectors are moving to")
    done: int = Field(description="vectors of the new model made so far")
    total: int = Field(description="vectors the org's rows need (grows with writes during the run)")
    started_at: datetime


class EmbedderOut(BaseModel):
    model: str = Field(description="the model whose vectors the org's rows hold and its searches compare")
    dimensions: int
    reembedding: ReembeddingOut | None = Field(default=None, description="the org's re-embedding under way, if any")
