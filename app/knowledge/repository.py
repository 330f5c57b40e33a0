from __future__ import annotations

import uuid

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from app.knowledge.models import Chunk, KnowledgeAsset


def asset_by_uri(db: Session, org_id: uuid.UUID, uri: str, *, for_update: bool = True) -> KnowledgeAsset | None:
    stmt = select(KnowledgeAsset).where(KnowledgeAsset.org_id == org_id, KnowledgeAsset.source_uri == uri)
    return db.execute(stmt.with_for_update() if for_update else stmt).scalar_one_or_none()


def chunk_hashes(db: Session, asset_id: uuid.UUID) -> list[str]:
    return list(db.execute(select(Chunk.content_hash).where(Chunk.asset_id == asset_id).order_by(Chunk.ord)).scalars())


def delete_chunks(db: Session, asset_id: uuid.UUID) -> list[uuid.UUID]:
    return list(db.execute(delete(Chunk).where(Chunk.asset_id == asset_id).returning(Chunk.id)).scalars())


def active_assets(db: Session, org_id: uuid.UUID, kind: str, uri_prefix: str) -> list[KnowledgeAsset]:
    return list(db.execute(select(KnowledgeAsset).where(
        KnowledgeAsset.org_id == org_id, KnowledgeAsset.kind == kind, KnowledgeAsset.status == "active",
        KnowledgeAsset.source_uri.startswith(uri_prefix, autoescape=True))).scalars())


def set_status(db: Session, asset_ids: list[uuid.UUID], status: str) -> None:
    if asset_ids:
        from app.cartridges.service import mark_stale

        org_ids = set(db.execute(select(KnowledgeAsset.org_id).where(KnowledgeAsset.id.in_(asset_ids))).scalars())
        db.execute(update(KnowledgeAsset).where(KnowledgeAsset.id.in_(asset_ids)).values(status=status))
        for org_id in org_ids:
            mark_stale(db, org_id, asset_ids, reason=f"assets {status}")


def owned_assets(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID) -> list[tuple[uuid.UUID, str]]:
    """(id, content_hash) of every asset the user owns."""
    return [tuple(r) for r in db.execute(select(KnowledgeAsset.id, KnowledgeAsset.content_hash).where(
        KnowledgeAsset.org_id == org_id, KnowledgeAsset.owner_id == owner_id)).all()]


def chunk_hashes_of_assets(db: Session, org_id: uuid.UUID, asset_ids: list[uuid.UUID]) -> list[str]:
    return list(db.execute(select(Chunk.content_hash).where(Chunk.org_id == org_id,
                                                            Chunk.asset_id.in_(asset_ids))).scalars())


def delete_owned_by(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID) -> int:
    return len(db.execute(delete(KnowledgeAsset).where(KnowledgeAsset.org_id == org_id,
                                                       KnowledgeAsset.owner_id == owner_id)
                          .returning(KnowledgeAsset.id)).all())
