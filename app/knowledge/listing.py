"""Listing knowledge assets: keyset pages of the assets the caller may see, and one asset with its
chunk count, for the console and any client that browses rather than searches. Both hand out
content (titles, sources), so they are recorded as retrievals like the memory and episode reads."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.errors import NotFound
from app.kit.http.listing import ItemFilters, next_cursor
from app.kit.items import ASSET
from app.knowledge import repository_listing as repo
from app.knowledge.models import KnowledgeAsset
from app.knowledge.schemas import AssetDetail, AssetOut, AssetPage


def to_out(a: KnowledgeAsset) -> AssetOut:
    return AssetOut(
        id=a.id,
        kind=a.kind,
        source_uri=a.source_uri,
        title=a.title,
        status=a.status,
        content_hash=a.content_hash,
        metadata=a.metadata_,
        owner_id=a.owner_id,
        created_at=a.created_at,
        updated_at=a.updated_at,
        visibility=a.visibility,
        groups=a.groups,
        labels=a.labels,
    )


def page(db: Session, principal: Principal, f: ItemFilters, status: str, read=None) -> AssetPage:
    """Assets with `status` visible in the caller's view (main, a branch, as of), in id order after `f.after`."""
    from app.kit.database.replicas import on
    from app.lineage.service import record_listing

    rows = (read or on(db))(lambda rdb: repo.page_visible(rdb, principal, f, (status,)))
    if rows:
        record_listing(db, principal, ASSET, rows)
    return AssetPage(items=[to_out(a) for a in rows], next_cursor=next_cursor(rows, f.limit))


def one(db: Session, principal: Principal, asset_id: uuid.UUID, read=None) -> AssetDetail:
    """One asset the caller may see in its view, with its chunk count; a 404 for an asset that is
    absent and for one the caller may not see alike. Recorded as a read of its content, as a GET is."""
    from app.kit.database.replicas import on
    from app.lineage.service import record_read

    found = (read or on(db))(lambda rdb: repo.one_visible(rdb, principal, asset_id))
    if found is None:
        raise NotFound("knowledge asset not found")
    a, chunks = found
    record_read(db, principal, "get", ASSET, a.id)
    return AssetDetail(**to_out(a).model_dump(), chunks=chunks)
