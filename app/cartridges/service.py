"""Cartridges as the service sees them: records with a derived scope, lineage to their assets,
staleness when an asset changes or goes, and the list handed to the inference tier.

The ``train_cartridge`` job (``pipelines/cartridges/job.py``) calls :func:`training_inputs`
before training and :func:`record_trained` after; it never touches records itself."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.cartridges import repository
from app.cartridges.models import CartridgeRecord
from app.kit import scope as scopes
from app.lineage.service import add_edge


def visible_active(db: Session, principal: Principal, limit: int = 8) -> list[CartridgeRecord]:
    return repository.visible_active(db, principal, limit)


def mark_stale(db: Session, org_id: uuid.UUID, asset_ids: list[uuid.UUID], reason: str) -> list[uuid.UUID]:
    """Cartridges trained on any of `asset_ids` are stale: never handed out again until retrained."""
    if not asset_ids:
        return []
    ids = repository.mark_stale(db, org_id, asset_ids)
    for cid in ids:
        record(db, org_id=org_id, actor_id=None, action="cartridge.stale", target_type="cartridge", target_id=cid,
               details={"reason": reason})
    return ids


@dataclass(frozen=True)
class TrainingInputs:
    """What a cartridge is trained on, already authorised: texts in corpus order, and the scope
    the cartridge will carry (the most restrictive of its assets')."""

    asset_ids: list[uuid.UUID]
    content_hashes: list[str]
    texts: list[str]
    scope: scopes.Scope


def training_inputs(db: Session, org_id: uuid.UUID, asset_ids: list[uuid.UUID] | None) -> TrainingInputs:
    """The assets a cartridge job trains on: the named ones (every one must exist in the org),
    else every active document. Raises ValueError when there is nothing to train on and
    ``IncompatibleScopes`` when the assets cannot share one item."""
    assets = repository.training_assets(db, org_id, asset_ids)
    if not assets or (asset_ids and len(assets) != len(set(asset_ids))):
        raise ValueError("no such assets (or some are missing) to train on")
    scope = scopes.derive([scopes.of(a) for a in assets])  # raises if they cannot share one item
    assert scope is not None
    return TrainingInputs(
        asset_ids=[a.id for a in assets],
        content_hashes=[a.content_hash for a in assets],
        texts=["\n\n".join(repository.chunk_texts(db, a.id)) for a in assets],
        scope=scope,
    )


def record_trained(db: Session, *, org_id: uuid.UUID, cartridge_id: uuid.UUID, actor_id: uuid.UUID | None,
                   owner_id: uuid.UUID, inputs: TrainingInputs, path: str, model_id: str, p: int,
                   stats: dict) -> CartridgeRecord:
    """The record of a trained cartridge (scope of its assets), ``trained_on`` lineage to each
    asset and an audit event, in the caller's transaction. Rerunning a job replaces its record."""
    scope = inputs.scope
    rec = repository.save(db, CartridgeRecord(
        id=cartridge_id, org_id=org_id, owner_id=owner_id, visibility=scope.visibility,
        groups=list(scope.groups), labels=list(scope.labels), path=path, model_id=model_id, p=p,
        asset_ids=list(inputs.asset_ids), stats={k: v for k, v in stats.items() if isinstance(v, (int, float, str))}))
    for asset_id in inputs.asset_ids:
        add_edge(db, org_id=org_id, from_type="cartridge", from_id=cartridge_id, to_type="asset", to_id=asset_id,
                 relation="trained_on", job_id=cartridge_id)
    record(db, org_id=org_id, actor_id=actor_id, action="cartridge.train", target_type="cartridge",
           target_id=cartridge_id, details={"assets": len(inputs.asset_ids), "p": p, "visibility": scope.visibility})
    return rec
