from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request, Response

from app.kit.database.replicas import reads
from app.kit.errors import COMMON_ERRORS
from app.kit.http.deps import SessionDep, require
from app.kit.http.listing import ItemFilters, item_filters
from app.kit.http.schemas import Instant
from app.memories import listing, service
from app.memories.schemas import DeclassifyIn, MemoryIn, MemoryOut, MemoryPage, MemoryPatch

router = APIRouter(prefix="/v1/memories", tags=["memories"], responses=COMMON_ERRORS)


@router.post("", status_code=201, response_model=MemoryOut)
def create_memory(body: MemoryIn, request: Request, db: SessionDep, principal=require("memory", "write")):
    return service.to_out(service.create(db, request.app.state.resources.embedder_for(db, principal.org_id), principal, body))


@router.get("", response_model=MemoryPage)
def list_memories(
    request: Request,
    db: SessionDep,
    f: Annotated[ItemFilters, Depends(item_filters)],
    status: Literal["active", "quarantined", "superseded"] = "active",
    as_of: Instant | None = None,
    principal=require("memory", "read"),
):
    """The memory versions the caller may see, a keyset page at a time (`cursor` = the last page's
    `next_cursor`); `since`/`until` on when a version was recorded; `as_of`: as the memory stood then."""
    principal = principal.at(as_of)
    return listing.page(db, principal, f, status, read=reads(request, db, principal))


@router.get("/{memory_id}", response_model=MemoryOut)
def get_memory(
    memory_id: uuid.UUID, request: Request, db: SessionDep, as_of: Instant | None = None, principal=require("memory", "read")
):
    """`as_of`: this memory version as it existed then (404 if it had not been recorded yet)."""
    principal = principal.at(as_of)
    return service.read_out(db, principal, memory_id, where=reads(request, db, principal))


@router.get("/{memory_id}/versions", response_model=MemoryPage)
def memory_versions(
    memory_id: uuid.UUID,
    request: Request,
    db: SessionDep,
    as_of: Instant | None = None,
    limit: int = Query(default=100, ge=1, le=500),
    principal=require("memory", "read"),
):
    """The versions of this memory's root the caller may see, newest first (`as_of`: those recorded
    by then); 404 when the caller may not see this memory. `next_cursor` is always null: `limit`
    bounds the list to the newest versions."""
    principal = principal.at(as_of)
    return listing.versions(db, principal, memory_id, limit, read=reads(request, db, principal))


@router.patch("/{memory_id}", response_model=MemoryOut)
def patch_memory(memory_id: uuid.UUID, body: MemoryPatch, request: Request, db: SessionDep, principal=require("memory", "write")):
    return service.to_out(
        service.patch(db, request.app.state.resources.embedder_for(db, principal.org_id), principal, memory_id, body)
    )


@router.delete("/{memory_id}", status_code=204)
def delete_memory(memory_id: uuid.UUID, db: SessionDep, principal=require("memory", "write")):
    service.delete(db, principal, memory_id)
    return Response(status_code=204)


@router.post("/{memory_id}/declassify", response_model=MemoryOut)
def declassify_memory(memory_id: uuid.UUID, body: DeclassifyIn, db: SessionDep, principal=require("memory", "declassify")):
    return service.to_out(service.declassify(db, principal, memory_id, body))
