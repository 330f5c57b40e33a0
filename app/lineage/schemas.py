"""Response bodies of the lineage and retrieval endpoints. A node's fields depend on what the
caller may see: a visible node has its text and scope, a hidden one (auditors only) just
`redacted`, a deleted one `deleted`; the endpoints leave unset fields out (exclude_unset)."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.feedback.schemas import Utility


class ItemRef(BaseModel):
    type: str
    id: str


class LineageNode(BaseModel):
    type: str
    id: str
    text: str | None = None
    visibility: str | None = None
    groups: list[str] | None = None
    labels: list[str] | None = None
    owner_id: str | None = None
    status: str | None = None
    kind: str | None = None
    redacted: bool | None = None
    deleted: bool | None = None
    utility: Utility | None = None  # a visible memory with feedback (app/feedback/service.py)


class LineageEdgeOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    from_: ItemRef = Field(alias="from")
    to: ItemRef
    relation: str
    job_id: str | None
    at: str


class LineageGraph(BaseModel):
    nodes: list[LineageNode]
    edges: list[LineageEdgeOut]


class RetrievedItem(BaseModel):
    type: str
    id: str
    score: float | None = None


class RetrievalOut(BaseModel):
    id: uuid.UUID
    actor: uuid.UUID
    kind: str
    query: str
    at: str
    params: dict[str, Any]
    items: list[RetrievedItem]
    feedback: list[dict[str, Any]] | None = None  # what was said of its items (POST /v1/feedback), when any


class RetrievalOfItem(BaseModel):
    id: uuid.UUID
    actor: uuid.UUID
    kind: str
    at: str
    score: float | None


class RetrievalsOfItem(BaseModel):
    retrievals: list[RetrievalOfItem]
