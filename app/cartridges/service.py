"""Cartridges as the service sees them: records with a derived scope, lineage to their assets,
staleness when an asset changes or goes, and the list handed to the inference tier."""

from __future__ import annotations

import uuid

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.cartridges.models import CartridgeRecord
from app.kit.access import visible_to


def visible_active(db: Session, principal: Principal, limit: int = 8) -> list[CartridgeRecord]:
    return list(db.execute(select(CartridgeRecord).where(visible_to(principal, CartridgeRecord),
                                                         CartridgeRecord.status == "active")
                           .order_by(CartridgeRecord.created_at.desc()).limit(limit)).scalars())


def mark_stale(db: Session, org_id: uuid.UUID, asset_ids: list[uuid.UUID], reason: str) -> list[uuid.UUID]:
    """Cartridges trained on any of `asset_ids` are stale: never handed out again until retrained."""
    if not asset_ids:
        return []
    ids = list(db.execute(update(CartridgeRecord).where(
        CartridgeRecord.org_id == org_id, CartridgeRecord.status == "active",
        CartridgeRecord.asset_ids.overlap(list(asset_ids))).values(status="stale").returning(CartridgeRecord.id)).scalars())
    for cid in ids:
        record(db, org_id=org_id, actor_id=None, action="cartridge.stale", target_type="cartridge", target_id=cid,
               details={"reason": reason})
    return ids
