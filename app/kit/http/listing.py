"""Keyset paging and item filters shared by the list endpoints (GET /v1/memories, /v1/episodes,
/v1/jobs): the cursor is the last id of a page, the order is the table's primary key (org_id, id),
so a page is one index range scan however many items the org holds."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from fastapi import Query

from app.kit.http.schemas import Instant

TAG = r"^[A-Za-z0-9_.:-]{1,64}$"


@dataclass(frozen=True)
class ItemFilters:
    """What a list request narrows to; every field only narrows what visible_to already allows."""

    kinds: tuple[str, ...] = ()
    owner: uuid.UUID | None = None
    visibility: str | None = None
    group: str | None = None
    label: str | None = None
    since: Instant | None = None
    until: Instant | None = None
    after: uuid.UUID | None = None
    limit: int = 50


def filters_for(kind_type: object = str, *, max_kinds: int = 10):
    """The list endpoints' query parameters as a FastAPI dependency (`cursor`: the `next_cursor` of
    the previous page). `kind` is typed `kind_type`: a Literal of an item type's kinds gives the
    OpenAPI enum and a 422 for any other value; plain `str` takes any kind (at most 64 characters)."""

    def dependency(
        *,
        kind=Query(default=[], max_length=max_kinds),
        owner: uuid.UUID | None = None,
        visibility: str | None = Query(default=None, pattern=r"^(private|group|org)$"),
        group: str | None = Query(default=None, pattern=TAG),
        label: str | None = Query(default=None, pattern=TAG),
        since: Instant | None = None,
        until: Instant | None = None,
        cursor: uuid.UUID | None = None,
        limit: int = Query(default=50, ge=1, le=500),
    ) -> ItemFilters:
        return ItemFilters(
            kinds=tuple(k[:64] for k in kind),
            owner=owner,
            visibility=visibility,
            group=group,
            label=label,
            since=since,
            until=until,
            after=cursor,
            limit=limit,
        )

    # FastAPI reads the type from the signature: set here, since the annotation is a value of this call.
    dependency.__annotations__["kind"] = list[kind_type]
    return dependency


item_filters = filters_for(str)


def next_cursor(rows: list, limit: int) -> str | None:
    """The cursor of the page after `rows` (None: this was the last page)."""
    return str(rows[-1].id) if len(rows) == limit else None
