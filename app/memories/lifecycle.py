"""What pipelines and erasure do to memories once they exist: consolidation's and retention's reads
and state changes (prune, expire, quarantine, restore) and the deletion cascade after a memory or
a source of one is gone (app/memories/cascade.py). Whole-org work: the job binds `all_scopes`.
New versions are written only through app/memories/versioning.py.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.audit.service import record
from app.kit.database.db import is_below, view_of
from app.kit.tenancy import scope as scopes
from app.kit.tenancy.repository_view import add_mask
from app.memories import cascade
from app.memories import repository as repo
from app.memories.models import Memory
from app.memories.versioning import supersede


def delete_root(db: Session, org_id: uuid.UUID, root_id: uuid.UUID, *, actor_id: uuid.UUID | None = None) -> list[uuid.UUID]:
    """Every version of a memory in this transaction's branch (app/memories/cascade.py
    `delete_versions`), then whatever was derived from it, whoever may see that: removed or
    quarantined (a `memory.cascade` audit event lists the ids). Returns the memory's own ids."""
    ids, reached = cascade.delete_root(db, org_id, root_id)
    if reached:
        record(
            db,
            org_id=org_id,
            actor_id=actor_id,
            action="memory.cascade",
            target_type="memory",
            target_id=root_id,
            details=reached.audit(),
        )
    return ids


def live_memories(db: Session, org_id: uuid.UUID, *, kind: str | None = None) -> list[Memory]:
    return repo.live_memories(db, org_id, kind=kind)


def nearest_in_scope(
    db: Session, org_id: uuid.UUID, owner_id: uuid.UUID, scope: scopes.Scope, vec, text: str
) -> tuple[Memory, float] | None:
    return repo.nearest_active(
        db,
        org_id,
        owner_id=owner_id,
        visibility=scope.visibility,
        groups=list(scope.groups),
        labels=list(scope.labels),
        vec=vec,
        text=text,
    )


def without_live_sources(db: Session, org_id: uuid.UUID, memories: list[Memory], sources: dict) -> set[uuid.UUID]:
    """Of distilled memories with `distilled_from` sources (`sources`: id -> edges), those whose
    every source is gone. Counted per version, as consolidation always has: a PATCHed distilled
    memory's new version carries no source edges of its own and is never pruned here (counting per
    root would prune it once its first version's sources are gone; the deletion cascade, which
    counts per root, already handles that case when the source is deleted)."""
    cands = [m.id for m in memories if sources.get(m.id) and m.provenance.get("origin") == "distill"]
    alive = repo.live_source_counts(db, org_id, cands, per="version", relations=("distilled_from",))
    return {i for i in cands if alive.get(i, 0) == 0}


def prune(db: Session, m: Memory, *, reason: str, job_id: uuid.UUID | None) -> None:
    """Remove a memory (every version, content included) that has nothing left to stand on."""
    delete_root(db, m.org_id, m.root_id)
    record(
        db,
        org_id=m.org_id,
        actor_id=None,
        action="memory.prune",
        target_type="memory",
        target_id=m.id,
        details={"reason": reason, "job_id": str(job_id)},
    )


def expire(db: Session, m: Memory, now: datetime, *, reason: str, job_id: uuid.UUID | None) -> None:
    supersede(db, m, now, close_validity=True)
    record(
        db,
        org_id=m.org_id,
        actor_id=None,
        action="memory.expire",
        target_type="memory",
        target_id=m.id,
        details={"reason": reason, "job_id": str(job_id)},
    )


def quarantine(db: Session, m: Memory, *, reason: str, job_id: uuid.UUID | None) -> None:
    """Hide a memory from every read path (e.g. a schema hint whose table changed) until restored.
    In a branch, a base row is masked instead (hidden in the branch for good)."""
    if is_below(db, m):
        add_mask(db, org_id=m.org_id, branch_id=view_of(db).branch_id, item_type="memories", key=m.root_id, at=datetime.now(UTC))
    else:
        m.status = "quarantined"
    record(
        db,
        org_id=m.org_id,
        actor_id=None,
        action="memory.quarantine",
        target_type="memory",
        target_id=m.id,
        details={"reason": reason, "job_id": str(job_id)},
    )


def restore(m: Memory) -> None:
    m.status = "active"


def roots_derived_from(db: Session, org_id: uuid.UUID, source_type: str, source_ids: list[uuid.UUID]) -> list[uuid.UUID]:
    return repo.roots_derived_from(db, org_id, source_type, source_ids)


def remove_or_quarantine(db: Session, org_id: uuid.UUID, roots: list[uuid.UUID], *, removed_source: uuid.UUID) -> cascade.Reached:
    """After a source is gone: `roots` (derived from it) and what was derived from them, transitively,
    whoever may see them. A root with no source left is removed (every version), one with sources
    left quarantined until re-derived (app/memories/cascade.py)."""
    return cascade.follow(db, org_id, roots, removed_source=removed_source)


def forget_sources(
    db: Session, org_id: uuid.UUID, gone: list[tuple[str, list[uuid.UUID]]], *, removed_source: uuid.UUID
) -> cascade.Reached:
    """The cascade after source rows of any type (`gone`: (type, ids)) were deleted."""
    return cascade.from_sources(db, org_id, gone, removed_source=removed_source)


def delete_owned_by(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID) -> cascade.Reached:
    """Right to be forgotten: every memory version the user owns, and the cascade from them."""
    return cascade.delete_owned_by(db, org_id, owner_id)
