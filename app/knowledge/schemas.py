"""Response bodies of knowledge navigation (the REST contract, v1 additions: Knowledge navigation)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from app.kit.http.schemas import AccessOut, StrictModel


class NodeRef(BaseModel):
    """A node as listed under its parent; `summary` only where the node has one."""

    id: str | None  # None for the root
    kind: str
    name: str
    path: str
    summary: str | None = None


class TreeOut(BaseModel):
    node: NodeRef
    children: list[NodeRef]
    truncated: bool  # more children than listed: ask again with `after=next`
    next: str | None = None  # cursor: the last path listed, when there are more


class Link(BaseModel):
    """What a node links to: `glossary_term`, `column`, `join`, `memory` or `lineage`, each with
    its own fields (ids, names, paths, texts; a join's from/to/via; lineage's relation/to/at)."""

    model_config = ConfigDict(extra="allow")

    type: str


class NodeOut(BaseModel):
    id: str
    kind: str
    name: str
    path: str
    text: str
    asset_id: str
    children: list[NodeRef]
    links: list[Link]


class AssetOut(AccessOut):
    """A knowledge asset as the asset list shows it (its chunks and tree nodes have their own reads)."""

    id: uuid.UUID
    kind: str
    source_uri: str
    title: str
    status: str
    content_hash: str
    metadata: dict[str, Any]
    owner_id: uuid.UUID
    created_at: datetime
    updated_at: datetime


class AssetDetail(AssetOut):
    """One asset (GET /v1/knowledge/assets/{id}): the list's fields and how many of its chunks the caller may see."""

    chunks: int


class AssetPage(StrictModel):
    """A keyset page: pass `next_cursor` as `cursor` for the next one (null: this was the last)."""

    items: list[AssetOut]
    next_cursor: str | None = None
