"""The statements behind the knowledge asset list and item (GET /v1/knowledge/assets, /{id}): one
keyset page of the assets the principal may see, or one of them, under visible_to like every other
list (app/kit/http/listing.py)."""

from __future__ import annotations

import uuid

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.http.listing import ItemFilters
from app.kit.http.repository_listing import item_terms, keyset
from app.kit.tenancy.access import visible_to
from app.knowledge.models import Chunk, KnowledgeAsset


def page_visible(db: Session, principal: Principal, f: ItemFilters, statuses: tuple[str, ...]) -> list[KnowledgeAsset]:
    """One page in id order (the primary key (org_id, id): an index range scan at any org size) of
    the assets visible to the principal in its view (main, a branch, as of: those created by then)
    with one of `statuses`; `since`/`until` on when the asset was created."""
    stmt = select(KnowledgeAsset).where(
        visible_to(principal, KnowledgeAsset),
        KnowledgeAsset.status.in_(statuses),
        *item_terms(KnowledgeAsset, f, KnowledgeAsset.created_at),
    )
    return list(db.execute(keyset(stmt, KnowledgeAsset, f)).scalars())


def one_visible(db: Session, principal: Principal, asset_id: uuid.UUID) -> tuple[KnowledgeAsset, int] | None:
    """The asset with this id if the principal may see it in its view (any status), with the number
    of its chunks the principal may see; None for an absent asset and for one it may not see alike."""
    chunks = (
        select(func.count())
        .select_from(Chunk)
        .where(visible_to(principal, Chunk), Chunk.asset_id == KnowledgeAsset.id)
        .scalar_subquery()
    )
    row = db.execute(
        select(KnowledgeAsset, chunks).where(visible_to(principal, KnowledgeAsset), KnowledgeAsset.id == asset_id).limit(1)
    ).first()
    return None if row is None else (row[0], row[1])
