from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.jobs.kinds import JOB_KINDS, KindName
from app.kit.http.schemas import StrictModel


def _params_per_kind(schema: dict) -> None:
    """`params` is checked against the kind's model (app/jobs/kinds.py): say so in the schema."""
    schema["allOf"] = [
        {
            "if": {"properties": {"kind": {"const": name}}, "required": ["kind"]},
            "then": {"properties": {"params": kind.params.model_json_schema()}},
        }
        for name, kind in JOB_KINDS.items()
    ]


class JobIn(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_params_per_kind)

    kind: KindName
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


class JobRef(BaseModel):
    """The job that carries out (and records) a deletion: DELETE /v1/episodes/{id}, /v1/users/{id}/data."""

    job_id: uuid.UUID


class JobPage(BaseModel):
    """A keyset page: pass `next_cursor` as `cursor` for the next one (null: this was the last)."""

    items: list[JobOut]
    next_cursor: str | None = None


class JobKindOut(BaseModel):
    name: KindName
    may_start: bool = Field(description="whether the caller's roles may start a job of this kind")


class JobKindsOut(BaseModel):
    kinds: list[JobKindOut]
