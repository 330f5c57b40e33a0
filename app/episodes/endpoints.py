from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request
from starlette.convertors import Convertor, register_url_convertor

from app.episodes import service
from app.episodes.schemas import BatchOut, EpisodeBatchIn, EpisodeIn, EpisodeOut, EpisodePage
from app.kit.database.replicas import reads
from app.kit.errors import COMMON_ERRORS, PayloadTooLarge
from app.kit.http.deps import SessionDep, require
from app.kit.http.listing import ItemFilters, item_filters
from app.kit.http.schemas import Instant


class _EpisodeIdSegment(Convertor):
    """Any path segment except `batch`: `/v1/episodes/batch` is its own path (POST only), so GET or
    DELETE on it must be a 405 with `Allow: POST`, not a 422 for a malformed episode id."""

    regex = "(?!batch$)[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value) -> str:
        return str(value)


register_url_convertor("episode_id", _EpisodeIdSegment())


def _charge(request: Request, principal, items: int) -> None:
    """Writes cost what they embed: the per-key ingest budget is counted in items."""
    limiter = getattr(request.app.state, "ingest_limiter", None)
    if limiter is not None:
        limiter.check(f"ingest:{principal.user_id}", cost=items)


router = APIRouter(prefix="/v1/episodes", tags=["episodes"], responses=COMMON_ERRORS)


@router.post("", status_code=201, response_model=EpisodeOut)
def create_episode(
    body: EpisodeIn,
    request: Request,
    db: SessionDep,
    principal=require("episode", "write"),
    idempotency_key: str | None = Header(default=None, min_length=1, max_length=200),
):
    _charge(request, principal, 1)
    return service.ingest(
        db,
        request.app.state.resources.embedder_for(db, principal.org_id),
        principal,
        [body],
        endpoint="episodes.create",
        body=body,
        idempotency_key=idempotency_key,
        ttl_s=request.app.state.settings.idempotency_ttl_s,
        reply=lambda rows: service.to_out(rows[0]),
    )


@router.post("/batch", status_code=201, response_model=BatchOut)
def create_batch(
    body: EpisodeBatchIn,
    request: Request,
    db: SessionDep,
    principal=require("episode", "write"),
    idempotency_key: str | None = Header(default=None, min_length=1, max_length=200),
):
    limit = request.app.state.settings.max_batch_items
    if len(body.items) > limit:
        raise PayloadTooLarge(f"a batch holds at most {limit} items", code="batch_too_large")
    _charge(request, principal, len(body.items))
    return service.ingest(
        db,
        request.app.state.resources.embedder_for(db, principal.org_id),
        principal,
        body.items,
        endpoint="episodes.batch",
        body=body,
        idempotency_key=idempotency_key,
        ttl_s=request.app.state.settings.idempotency_ttl_s,
        reply=lambda rows: BatchOut(ids=[r.id for r in rows]),
    )


@router.get("", response_model=EpisodePage)
def list_episodes(
    request: Request,
    db: SessionDep,
    f: Annotated[ItemFilters, Depends(item_filters)],
    as_of: Instant | None = None,
    principal=require("episode", "read"),
):
    """The episodes the caller may see, a keyset page at a time (`cursor` = the last page's
    `next_cursor`); `since`/`until` on when they happened. `as_of`: the episodes stored by then
    (episodes are append-only: one stored later is out, one erased or expired since stays gone)."""
    principal = principal.at(as_of)
    return service.page(db, principal, f, read=reads(request, db, principal))


@router.get("/{episode_id:episode_id}", response_model=EpisodeOut)
def get_episode(
    episode_id: uuid.UUID, request: Request, db: SessionDep, as_of: Instant | None = None, principal=require("episode", "read")
):
    """`as_of`: 404 unless the episode had been stored by then."""
    principal = principal.at(as_of)
    return service.to_out(service.read(db, principal, episode_id, read=reads(request, db, principal)))
