"""The statement behind the knowledge asset list (GET /v1/knowledge/assets): one keyset page of
the assets the principal may see, under visible_to like every other list (app/kit/http/listing.py)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.http.listing import ItemFilters
from app.kit.http.repository_listing import item_terms, keyset
from app.kit.tenancy.access import visible_to
from app.knowledge.models import KnowledgeAsset


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
