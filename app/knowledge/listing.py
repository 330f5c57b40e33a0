"""Listing knowledge assets: keyset pages of the assets the caller may see, for the console and any
client that browses rather than searches. A page hands out content (titles, sources), so it is
recorded as a retrieval like the memory and episode lists."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.http.listing import ItemFilters, next_cursor
from app.kit.items import ASSET
from app.knowledge import repository_listing as repo
from app.knowledge.models import KnowledgeAsset
from app.knowledge.schemas import AssetOut, AssetPage


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
