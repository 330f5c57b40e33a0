"""Knowledge navigation (the REST contract, v1 additions): the tree and its nodes, only of visible assets."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Query

from app.kit.errors import COMMON_ERRORS
from app.kit.http.deps import SessionDep, require
from app.knowledge import navigation
from app.knowledge.schemas import NodeOut, TreeOut

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
