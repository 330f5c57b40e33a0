from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from app.feedback.schemas import Utility
from app.kit.http.schemas import GROUPS_MATCH_VISIBILITY, AccessIn, AccessOut, Instant, NumberOnly, StrictModel, Tag, Visibility
from app.kit.items import SourceType

MemoryKind = Literal["fact", "rule", "preference", "procedure", "schema_hint", "instruction", "skill"]
AgentId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]


class SourceRef(StrictModel):
    type: SourceType
    id: uuid.UUID


# `agent_id` goes with kinds instruction and skill, and only with them: stated in the JSON schema
# too (as AccessIn states its groups rule), so that clients and schemathesis know it.
_AGENT_ID_WITH_AGENT_KINDS = {
    "if": {"properties": {"kind": {"enum": ["instruction", "skill"]}}, "required": ["kind"]},
    "then": {"properties": {"agent_id": {"type": "string"}}, "required": ["agent_id"]},
    "else": {"properties": {"agent_id": {"type": "null"}}},
}


class MemoryIn(AccessIn):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": [GROUPS_MATCH_VISIBILITY, _AGENT_ID_WITH_AGENT_KINDS]})

    text: str = Field(min_length=1, max_length=20_000)
    kind: MemoryKind
    confidence: Annotated[float, Field(ge=0.0, le=1.0), NumberOnly] = 0.8
    sources: list[SourceRef] = Field(default_factory=list, max_length=100)
    valid_from: Instant | None = None
    # An agent's profile: kind "instruction" (its system prompt) or "skill", for this agent.
    agent_id: AgentId | None = None

    @model_validator(mode="after")
    def _agent_profile(self) -> MemoryIn:
        if (self.kind in ("instruction", "skill")) != (self.agent_id is not None):
            raise ValueError("kinds 'instruction' and 'skill' belong to an agent: give agent_id with them (only)")
        return self


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
    agent_id: str | None = None
    utility: Utility | None = None  # on GET, once the memory has feedback (app/feedback/service.py)


class DeclassifyIn(AccessIn):
    reason: str = Field(min_length=3, max_length=2000)


class MemoryPage(StrictModel):
    """A keyset page: pass `next_cursor` as `cursor` for the next one (null: this was the last)."""

    items: list[MemoryOut]
    next_cursor: str | None = None
