from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.kit.schemas import StrictModel


def _params_per_kind(schema: dict) -> None:
    """`params` is checked against the kind's model (app/jobs/params.py): say so in the schema."""
    from app.jobs.params import PARAMS

    schema["allOf"] = [{"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
                        "then": {"properties": {"params": model.model_json_schema()}}}
                       for kind, model in PARAMS.items()]


class JobIn(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_params_per_kind)

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


class JobRef(BaseModel):
    """The job that carries out (and records) a deletion: DELETE /v1/episodes/{id}, /v1/users/{id}/data."""

    job_id: uuid.UUID


class JobPage(BaseModel):
    """A keyset page: pass `next_cursor` as `cursor` for the next one (null: this was the last)."""

    items: list[JobOut]
    next_cursor: str | None = None
