"""Cartridges as the service sees them: records with a derived scope, lineage to their assets,
staleness when an asset changes or goes, and the list handed to the inference tier.

The ``train_cartridge`` job (``pipelines/cartridges/job.py``) calls :func:`training_inputs`
before training and :func:`record_trained` after; it never touches records itself."""

from __future__ import annotations

import logging
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.cartridges import repository
from app.cartridges.models import CartridgeRecord
from app.kit.tenancy import scope as scopes
from app.lineage.service import add_edge

log = logging.getLogger(__name__)


def visible_active(db: Session, principal: Principal, limit: int = 8) -> list:
    return repository.visible_active(db, principal, limit)


def mark_stale(db: Session, org_id: uuid.UUID, asset_ids: list[uuid.UUID], reason: str) -> list[uuid.UUID]:
    """Cartridges trained on any of `asset_ids` are stale: never handed out again until retrained."""
    return _mark(db, org_id, asset_ids, status="stale", among=("active",), action="cartridge.stale", reason=reason)


def erase(db: Session, org_id: uuid.UUID, asset_ids: list[uuid.UUID], reason: str) -> list[uuid.UUID]:
    """Cartridges trained on any of `asset_ids`, which are being erased, are ``erased`` (active or
    stale: a stale one's files still hold the text): never handed out, and their files (the KV, the
    self-study conversations in plain text, checkpoints) are removed by :func:`remove_files` once
    this transaction has committed. Returns their ids."""
    return _mark(db, org_id, asset_ids, status="erased", among=("active", "stale"), action="cartridge.erase", reason=reason)


def _mark(
    db: Session, org_id: uuid.UUID, asset_ids: list[uuid.UUID], *, status: str, among: tuple[str, ...], action: str, reason: str
) -> list[uuid.UUID]:
    """Cartridges of `among` statuses trained on any of `asset_ids` get `status`, each with an
    audit event `action`; their ids."""
    if not asset_ids:
        return []
    ids = repository.mark(db, org_id, asset_ids, status, among)
    for cid in ids:
        record(
            db, org_id=org_id, actor_id=None, action=action, target_type="cartridge", target_id=cid, details={"reason": reason}
        )
    return ids


def folder(data_dir: Path, cartridge_id: uuid.UUID) -> Path:
    """Where the train_cartridge job of this id writes everything (``<data_dir>/cartridges/<id>``)."""
    return Path(data_dir).resolve() / "cartridges" / str(cartridge_id)


def remove_files(data_dir: Path, cartridge_ids: list[uuid.UUID]) -> int:
    """After the commit of an erasure: delete the cartridges' folders; returns how many existed."""
    n = 0
    for cid in cartridge_ids:
        d = folder(data_dir, uuid.UUID(str(cid)))  # an id, never a path: nothing outside the folder
        if d.exists():
            try:
                shutil.rmtree(d)
                n += 1
            except OSError as exc:  # left for the next sweep (sweep_erased), never fails the erasure
                log.warning("cartridge folder %s not removed yet: %s", d, exc)
    return n


def sweep_erased(db: Session, org_id: uuid.UUID, data_dir: Path) -> int:
    """Remove what an erasure left on disk if the process stopped between its commit and
    :func:`remove_files` (run by every train_cartridge job and every retention job)."""
    return remove_files(data_dir, repository.erased_ids(db, org_id))


class ErasedDuringTraining(RuntimeError):
    """An asset a cartridge was trained on was erased before the cartridge was recorded."""


@dataclass(frozen=True)
class TrainingInputs:
    """What a cartridge is trained on, already authorised: texts in corpus order, and the scope
    the cartridge will carry (the most restrictive of its assets')."""

    asset_ids: list[uuid.UUID]
    content_hashes: list[str]
    statuses: list[str]
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
        statuses=[a.status for a in assets],
        texts=["\n\n".join(repository.chunk_texts(db, a.id)) for a in assets],
        scope=scope,
    )


def record_trained(
    db: Session,
    *,
    org_id: uuid.UUID,
    cartridge_id: uuid.UUID,
    actor_id: uuid.UUID | None,
    owner_id: uuid.UUID,
    inputs: TrainingInputs,
    path: str,
    model_id: str,
    p: int,
    stats: dict,
) -> CartridgeRecord:
    """The record of a trained cartridge (scope of its assets), ``trained_on`` lineage to each
    asset and an audit event, in the caller's transaction. Rerunning a job replaces its record.

    The assets are checked again (share-locked) first: one erased while the job trained raises
    :class:`ErasedDuringTraining` (the caller deletes the output, nothing is recorded); one that
    changed or was dropped makes the new record ``stale`` at once."""
    now = repository.current_state(db, org_id, inputs.asset_ids)
    if len(now) != len(set(inputs.asset_ids)):
        raise ErasedDuringTraining(
            "assets this cartridge was trained on were erased while it trained; its files were deleted and nothing was recorded"
        )
    fresh = all(now[a] == state for a, state in zip(inputs.asset_ids, zip(inputs.content_hashes, inputs.statuses)))
    scope = inputs.scope
    rec = repository.save(
        db,
        CartridgeRecord(
            id=cartridge_id,
            org_id=org_id,
            owner_id=owner_id,
            status="active" if fresh else "stale",
            visibility=scope.visibility,
            groups=list(scope.groups),
            labels=list(scope.labels),
            path=path,
            model_id=model_id,
            p=p,
            asset_ids=list(inputs.asset_ids),
            stats={k: v for k, v in stats.items() if isinstance(v, (int, float, str))},
        ),
    )
    for asset_id in inputs.asset_ids:
        add_edge(
            db,
            org_id=org_id,
            from_type="cartridge",
            from_id=cartridge_id,
            to_type="asset",
            to_id=asset_id,
            relation="trained_on",
            job_id=cartridge_id,
        )
    record(
        db,
        org_id=org_id,
        actor_id=actor_id,
        action="cartridge.train",
        target_type="cartridge",
        target_id=cartridge_id,
        details={"assets": len(inputs.asset_ids), "p": p, "visibility": scope.visibility},
    )
    return rec
