"""Every statement of the cartridges domain.

Training reads knowledge assets and their chunks: the assets a job trains on are named by the
org's steward (or all active documents), and their text is the chunks in order, the same text
whose content hashes the inference tier keys its chunk KV by.
"""

from __future__ import annotations

import uuid

from sqlalchemy import Integer, bindparam, select, update
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.cartridges.models import CartridgeRecord
from app.kit.database.db import view_of
from app.kit.database.sql import StatementCache
from app.kit.tenancy.access import visible_to
from app.kit.tenancy.repository_view import in_view
from app.knowledge.models import Chunk, KnowledgeAsset

_STATEMENTS = StatementCache(512)


def visible_active(db: Session, principal: Principal, limit: int) -> list:
    """Newest first: (id, p, model_id) of the cartridges a caller may be handed (every
    trained-on asset visible). Every /v1/context asks, so the statement is built once per caller
    (the key holds the whole principal, as search's do: app.kit.database.sql.StatementCache); building the
    access filter afresh was ~2 ms of Python a request at LoCoMo scale, ~1.5× what PostgreSQL spent."""

    def build():
        return (
            select(CartridgeRecord.id, CartridgeRecord.p, CartridgeRecord.model_id)
            .where(visible_to(principal, CartridgeRecord), CartridgeRecord.status == "active")
            .order_by(CartridgeRecord.created_at.desc(), CartridgeRecord.id)
            .limit(bindparam("lim", type_=Integer))
        )

    return _STATEMENTS.run(db, ("active", principal), build, {"lim": limit}).all()


def mark(db: Session, org_id: uuid.UUID, asset_ids: list[uuid.UUID], status: str, among: tuple[str, ...]) -> list[uuid.UUID]:
    """Cartridges of the org in one of the `among` statuses trained on any of ``asset_ids`` get
    `status`; their ids."""
    return list(
        db.execute(
            update(CartridgeRecord)
            .where(
                CartridgeRecord.org_id == org_id,
                CartridgeRecord.status.in_(among),
                CartridgeRecord.asset_ids.overlap(list(asset_ids)),
            )
            .values(status=status)
            .returning(CartridgeRecord.id)
        ).scalars()
    )


def erased_ids(db: Session, org_id: uuid.UUID) -> list[uuid.UUID]:
    return list(
        db.execute(
            select(CartridgeRecord.id).where(CartridgeRecord.org_id == org_id, CartridgeRecord.status == "erased")
        ).scalars()
    )


def current_state(db: Session, org_id: uuid.UUID, asset_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, str]]:
    """{asset id: (content hash, status)} of those still there, share-locked until the caller
    commits, so an erasure cannot delete them between this check and the caller's write."""
    rows = db.execute(
        select(KnowledgeAsset.id, KnowledgeAsset.content_hash, KnowledgeAsset.status)
        .where(KnowledgeAsset.org_id == org_id, KnowledgeAsset.id.in_(list(asset_ids)))
        .with_for_update(read=True)
    )
    return {i: (h, st) for i, h, st in rows}


def save(db: Session, record: CartridgeRecord) -> CartridgeRecord:
    """Insert, or replace the record of a rerun job (the cartridge id is the job id)."""
    return db.merge(record)


def training_assets(db: Session, org_id: uuid.UUID, asset_ids: list[uuid.UUID] | None) -> list[KnowledgeAsset]:
    """The named assets of the org (any status: the caller checks), else its active documents;
    ordered by source URI so that a corpus is always concatenated in the same order. Main's only
    (training runs in main: the job's view)."""
    q = select(KnowledgeAsset).where(KnowledgeAsset.org_id == org_id, in_view(view_of(db), KnowledgeAsset))
    if asset_ids:
        q = q.where(KnowledgeAsset.id.in_(asset_ids))
    else:
        q = q.where(KnowledgeAsset.status == "active", KnowledgeAsset.kind == "document")
    return list(db.execute(q.order_by(KnowledgeAsset.source_uri)).scalars())


def chunk_texts(db: Session, asset_id: uuid.UUID) -> list[str]:
    return list(db.execute(select(Chunk.text).where(Chunk.asset_id == asset_id).order_by(Chunk.ord)).scalars())
