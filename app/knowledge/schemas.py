"""Response bodies of knowledge navigation (the REST contract, v1 additions: Knowledge navigation)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


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
