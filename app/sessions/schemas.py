from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.kit.http.schemas import Instant, NumberOnly, StrictModel
from app.memories.schemas import AgentId

Label = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\- ]+$")]
BlockText = Annotated[str, StringConstraints(max_length=4000)]


def _keys_by_pattern(schema: dict) -> None:
    """pydantic states a key pattern as `patternProperties`, which lets any other key hold anything;
    say what is enforced instead: every key matches (`propertyNames`), every value is a block."""
    ((pattern, value),) = schema.pop("patternProperties").items()
    schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}
    schema["additionalProperties"] = value


class SessionIn(StrictModel):
    budget_tokens: Annotated[int, Field(ge=256, le=128_000), NumberOnly] = 4000
    working_context: dict[Label, BlockText] = Field(default_factory=dict, max_length=10, json_schema_extra=_keys_by_pattern)


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
    reward: Annotated[float, Field(ge=-1e6, le=1e6), NumberOnly] | None = None
    note: str | None = Field(default=None, max_length=2000)


class ContextIn(StrictModel):
    query: str = Field(min_length=1, max_length=2000)
    session_id: uuid.UUID | None = None
    budget_tokens: Annotated[int, Field(ge=64, le=128_000), NumberOnly] = 2000
    instruction: str | None = Field(default=None, max_length=1000)  # constraints in words
    # The stored memory as recorded then; a session's own state (working context,
    # summary, recent messages) is always today's.
    as_of: Instant | None = None
    # Assemble this agent's profile first: its instructions (pinned) and its skills.
    agent_id: AgentId | None = None


class ContextItem(BaseModel):
    """One item of a context section; items carry what they are (kind, outcome, session_id,
    occurred_at, content_hash, seq, neighbour_of, ...) beside these fields."""

    model_config = ConfigDict(extra="allow")

    type: str
    id: str | None
    text: str
    score: float


class ContextSection(BaseModel):
    name: str
    tokens: int
    items: list[ContextItem]


class SessionContextOut(BaseModel):
    id: uuid.UUID
    text: str
    tokens: int
    budget_tokens: int
    pressure: float
    summary: str | None
    sections: list[ContextSection]
    evictions: int
    warning: str | None


class HandoffCartridge(BaseModel):
    id: str
    p: int
    model_id: str


class HandoffChunk(BaseModel):
    content_hash: str
    chunk_id: str | None


class Handoff(BaseModel):
    """What the inference tier needs: cartridges and chunk hashes (signed by `token`), and the prompt."""

    cartridges: list[HandoffCartridge]
    chunks: list[HandoffChunk]
    prompt: str
    token: str
    token_expires_in_s: int
    # The caps signed into `token` (the tier refuses a request beyond them).
    max_prompt_tokens: int | None = None
    max_new_tokens: int | None = None


class ContextOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: str
    tokens: int
    budget_tokens: int
    sections: list[ContextSection]
    retrieval_id: uuid.UUID
    handoff: Handoff


class ToolSchema(BaseModel):
    type: str
    function: dict[str, Any]


class ToolList(BaseModel):
    tools: list[ToolSchema]


class ToolResult(BaseModel):
    """`ok`, the agent's `heartbeat` request echoed, and what the tool returns (or `error`)."""

    model_config = ConfigDict(extra="allow")

    ok: bool
    heartbeat: bool
