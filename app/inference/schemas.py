"""The inference tier's wire format: request and response bodies of ``server.py``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.inference.modes import Mode
from app.inference.store import content_hash


class ChunkIn(BaseModel):
    model_config = ConfigDict(extra="ignore")  # handoff chunks may carry more fields
    text: str | None = Field(None, min_length=1)
    content_hash: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")

    @model_validator(mode="after")
    def _one_of(self) -> ChunkIn:
        if self.text is None and self.content_hash is None:
            raise ValueError("a chunk needs `text` or `content_hash`")
        if self.text is not None and self.content_hash is not None and content_hash(self.text) != self.content_hash:
            raise ValueError("content_hash is not the sha256 of text")
        return self


class GenerateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(min_length=1, max_length=200_000)
    chunks: list[ChunkIn] = Field(default_factory=list, max_length=256)
    cartridges: list[str] = Field(default_factory=list, max_length=16)
    max_tokens: int = Field(64, ge=1, le=2048)
    mode: Mode = "blend"
    recompute_ratio: float | None = Field(None, ge=0.0, le=1.0)


class Timings(BaseModel):
    ttft_s: float
    total_s: float
    tokens_per_s: float


class GenerateOut(BaseModel):
    text: str
    timings: Timings
    prompt_tokens: int
    recomputed_tokens: int


class ChunksIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[str] = Field(min_length=1)


class ChunksOut(BaseModel):
    content_hashes: list[str]


class ErrorBody(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorBody
