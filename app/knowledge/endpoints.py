"""Knowledge navigation (the REST contract, v1 additions): the tree and its nodes, only of visible
assets; and the asset list and item the console browses (docs/console.md)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from app.kit.database.replicas import reads
from app.kit.errors import COMMON_ERRORS
from app.kit.http.deps import SessionDep, require
from app.kit.http.listing import ItemFilters, filters_for
from app.kit.http.schemas import Instant
from app.knowledge import listing, navigation
from app.knowledge.kinds import ASSET_KINDS, AssetKind, AssetStatus
from app.knowledge.schemas import AssetDetail, AssetPage, NodeOut, TreeOut

router = APIRouter(prefix="/v1/knowledge", tags=["knowledge"], responses=COMMON_ERRORS)


@router.get("/tree", response_model=TreeOut, response_model_exclude_unset=True)
def tree(
    db: SessionDep,
    path: str | None = Query(default=None, max_length=2000, pattern=r"^[^\x00-\x1f]*$"),
    limit: int = Query(default=navigation.MAX_CHILDREN, ge=1, le=navigation.MAX_CHILDREN),
    after: str | None = Query(default=None, max_length=2000, pattern=r"^[^\x00-\x1f]*$"),
    as_of: Instant | None = None,
    principal=require("knowledge", "read"),
):
    """`{node, children: [{id, kind, name, path, summary?}], truncated, next}`; the root without
    `path`. Children by path, `limit` at a time (default and most 1,000); `after=<next>` pages on.
    `as_of`: the nodes that existed then (written by then, of assets still active today)."""
    return navigation.tree(db, principal.at(as_of), path, limit=limit, after=after)


@router.get("/nodes/{node_id}", response_model=NodeOut, response_model_exclude_unset=True)
def node(node_id: uuid.UUID, db: SessionDep, principal=require("knowledge", "read")):
    """`{id, kind, name, path, text, children, links}`: glossary terms, joins, derived memories, lineage."""
    return navigation.node(db, principal, node_id)


# `kind` one of the asset kinds: the OpenAPI enum, and a 422 for any other.
asset_filters = filters_for(AssetKind, max_kinds=len(ASSET_KINDS))


@router.get("/assets", response_model=AssetPage)
def list_assets(
    request: Request,
    db: SessionDep,
    f: Annotated[ItemFilters, Depends(asset_filters)],
    status: AssetStatus = "active",
    as_of: Instant | None = None,
    principal=require("knowledge", "read"),
):
    """The knowledge assets the caller may see, a keyset page at a time (`cursor` = the last page's
    `next_cursor`); `since`/`until` on when an asset was created; `as_of`: the assets that existed
    then (and still exist)."""
    principal = principal.at(as_of)
    return listing.page(db, principal, f, status, read=reads(request, db, principal))


@router.get("/assets/{asset_id}", response_model=AssetDetail)
def get_asset(
    asset_id: uuid.UUID, request: Request, db: SessionDep, as_of: Instant | None = None, principal=require("knowledge", "read")
):
    """One asset as the list shows it, with its status and the number of its chunks the caller may
    see; `as_of`: as it existed then. An asset the caller may not see is a 404, as an absent one."""
    principal = principal.at(as_of)
    return listing.one(db, principal, asset_id, read=reads(request, db, principal))
