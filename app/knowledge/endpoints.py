"""Knowledge navigation (the REST contract, v1 additions): the tree and its nodes, only of visible
assets; and the asset list the console browses (docs/knowledge.md, "Listing assets")."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from app.kit.database.replicas import reads
from app.kit.errors import COMMON_ERRORS, BadRequest
from app.kit.http.deps import SessionDep, require
from app.kit.http.listing import ItemFilters, item_filters
from app.kit.http.schemas import Instant
from app.knowledge import listing, navigation
from app.knowledge.kinds import ASSET_KINDS, AssetStatus
from app.knowledge.schemas import AssetPage, NodeOut, TreeOut

router = APIRouter(prefix="/v1/knowledge", tags=["knowledge"], responses=COMMON_ERRORS)


@router.get("/tree", response_model=TreeOut, response_model_exclude_unset=True)
def tree(
    db: SessionDep,
    path: str | None = Query(default=None, max_length=2000, pattern=r"^[^\x00-\x1f]*$"),
    limit: int = Query(default=navigation.MAX_CHILDREN, ge=1, le=navigation.MAX_CHILDREN),
    after: str | None = Query(default=None, max_length=2000, pattern=r"^[^\x00-\x1f]*$"),
    principal=require("knowledge", "read"),
):
    """`{node, children: [{id, kind, name, path, summary?}], truncated, next}`; the root without
    `path`. Children by path, `limit` at a time (default and most 1,000); `after=<next>` pages on."""
    return navigation.tree(db, principal, path, limit=limit, after=after)


@router.get("/nodes/{node_id}", response_model=NodeOut, response_model_exclude_unset=True)
def node(node_id: uuid.UUID, db: SessionDep, principal=require("knowledge", "read")):
    """`{id, kind, name, path, text, children, links}`: glossary terms, joins, derived memories, lineage."""
    return navigation.node(db, principal, node_id)


@router.get("/assets", response_model=AssetPage)
def list_assets(
    request: Request,
    db: SessionDep,
    f: Annotated[ItemFilters, Depends(item_filters)],
    status: AssetStatus = "active",
    as_of: Instant | None = None,
    principal=require("knowledge", "read"),
):
    """The knowledge assets the caller may see, a keyset page at a time (`cursor` = the last page's
    `next_cursor`); `kind` one of the asset kinds; `since`/`until` on when an asset was created;
    `as_of`: the assets that existed then (and still exist)."""
    unknown = sorted(set(f.kinds) - set(ASSET_KINDS))
    if unknown:
        raise BadRequest(f"unknown asset kind(s) {', '.join(unknown)}; kinds: {', '.join(ASSET_KINDS)}", code="unknown_kind")
    principal = principal.at(as_of)
    return listing.page(db, principal, f, status, read=reads(request, db, principal))
