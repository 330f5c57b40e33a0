from __future__ import annotations

import uuid
from typing import Literal

from fastapi import APIRouter, Query, Request

from app.kit.database.replicas import reads
from app.kit.errors import COMMON_ERRORS
from app.kit.http.deps import SessionDep, require
from app.kit.http.schemas import Instant
from app.kit.items import ItemName
from app.lineage import service
from app.lineage.schemas import LineageGraph, RetrievalOut, RetrievalsOfItem

router = APIRouter(prefix="/v1", tags=["compliance"], responses=COMMON_ERRORS)


@router.get("/lineage/{item_type}/{item_id}", response_model=LineageGraph, response_model_exclude_unset=True)
def lineage(
    item_type: ItemName,
    item_id: uuid.UUID,
    request: Request,
    db: SessionDep,
    direction: Literal["up", "down", "both"] = "both",
    depth: int = Query(default=5, ge=1, le=20),
    as_of: Instant | None = None,
    principal=require("lineage", "read"),
):
    """`as_of`: the graph as recorded then (edges and nodes of that instant, today's access rules)."""
    principal = principal.at(as_of)
    return service.graph(db, principal, item_type, item_id, direction=direction, depth=depth, read=reads(request, db, principal))


@router.get("/retrievals/{retrieval_id}", response_model=RetrievalOut, response_model_exclude_unset=True)
def retrieval(retrieval_id: uuid.UUID, db: SessionDep, principal=require("retrieval", "read")):
    return service.retrieval(db, principal, retrieval_id)


@router.get("/retrievals", response_model=RetrievalsOfItem)
def retrievals_of_item(
    item_id: uuid.UUID, db: SessionDep, limit: int = Query(default=50, ge=1, le=500), principal=require("retrieval", "read")
):
    """Which retrievals handed out this item: all of them for auditors/admins, your own otherwise."""
    return {"retrievals": service.retrievals_of(db, principal, item_id, limit)}
