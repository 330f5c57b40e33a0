"""Statements over memories (and the lineage edges that say what each was derived from)."""

from __future__ import annotations

import uuid

from sqlalchemy import and_, delete, select, update
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.database.db import view_of
from app.kit.http.listing import ItemFilters
from app.kit.http.repository_listing import item_terms, keyset
from app.kit.items import MEMORY
from app.kit.registry import SOURCE_TYPES, model_of
from app.kit.tenancy.access import visible_to
from app.kit.tenancy.repository_view import in_view, memory_state
from app.lineage.models import LineageEdge
from app.memories.models import Memory

LIVE = ("active", "quarantined")  # the current version of a memory root is in one of these


def _state(db: Session, statuses) -> list:
    """Versions of `statuses` in the transaction's view (pipelines' org-level reads: main, or the
    branch a job runs in, app/kit/tenancy/view.py)."""
    view = view_of(db)
    return [in_view(view, Memory), memory_state(view, Memory, statuses)]


def get_visible(db: Session, principal: Principal, memory_id: uuid.UUID, *, for_update: bool = False) -> Memory | None:
    stmt = select(Memory).where(Memory.id == memory_id, visible_to(principal, Memory))
    if for_update:
        stmt = stmt.with_for_update()
    return db.execute(stmt).scalar_one_or_none()


def _seen(principal: Principal, statuses) -> list:
    """Versions the principal may see that had one of `statuses` in its view (main, a branch, as of)."""
    return [visible_to(principal, Memory), memory_state(principal.view, Memory, statuses)]


def current_of_root(
    db: Session, principal: Principal, root_id: uuid.UUID, statuses: tuple[str, ...] = ("active",)
) -> Memory | None:
    """The principal's view of a root: its version of `statuses` (the newest), locked."""
    return db.execute(
        select(Memory)
        .where(Memory.root_id == root_id, *_seen(principal, statuses))
        .order_by(Memory.version.desc())
        .limit(1)
        .with_for_update()
    ).scalar_one_or_none()


def agent_profile(db: Session, principal: Principal, agent_id: str) -> list[Memory]:
    return list(
        db.execute(
            select(Memory)
            .where(Memory.agent_id == agent_id, *_seen(principal, ("active",)))
            .order_by(Memory.kind, Memory.recorded_at)
        ).scalars()
    )


def page_visible(db: Session, principal: Principal, f: ItemFilters, statuses: tuple[str, ...]) -> list[Memory]:
    """One keyset page of the versions the principal may see that had one of `statuses` in its view."""
    stmt = select(Memory).where(*_seen(principal, statuses), *item_terms(Memory, f, Memory.recorded_at))
    return list(db.execute(keyset(stmt, Memory, f)).scalars())


def versions_visible(db: Session, principal: Principal, root_id: uuid.UUID, limit: int) -> list[Memory]:
    """The versions of a root the principal may see in its view (main, a branch, as of), newest first."""
    return list(
        db.execute(
            select(Memory)
            .where(Memory.root_id == root_id, visible_to(principal, Memory))
            .order_by(Memory.version.desc(), Memory.recorded_at.desc(), Memory.id)
            .limit(limit)
        ).scalars()
    )


def visible_sources(db: Session, principal: Principal, type_: str, ids: list[uuid.UUID]) -> list:
    model = model_of(type_)
    return list(db.execute(select(model).where(model.id.in_(ids), visible_to(principal, model))).scalars())


def delete_root(db: Session, org_id: uuid.UUID, root_id: uuid.UUID, *, branch: uuid.UUID | None = None) -> list[uuid.UUID]:
    """Every version of a root (`branch`: only that branch's versions)."""
    stmt = delete(Memory).where(Memory.org_id == org_id, Memory.root_id == root_id)
    if branch is not None:
        stmt = stmt.where(Memory.branch_id == branch)
    return list(db.execute(stmt.returning(Memory.id)).scalars())


def scopes_of_root(db: Session, org_id: uuid.UUID, root_id: uuid.UUID, *, branch_id: uuid.UUID | None) -> list:
    """(id, owner_id, visibility, groups, labels) of the versions of a root a narrowing reaches,
    locked: written in main (`branch_id` None), every version in main and in every
    branch; written in a branch, that branch's own versions only (a branch write never changes
    main). The caller binds `every_scope` (as erasure does): the narrowing must reach rows it
    cannot see, and ids and scopes are all it reads."""
    stmt = select(Memory.id, Memory.owner_id, Memory.visibility, Memory.groups, Memory.labels).where(
        Memory.org_id == org_id, Memory.root_id == root_id
    )
    if branch_id is not None:
        stmt = stmt.where(Memory.branch_id == branch_id)
    return list(db.execute(stmt.order_by(Memory.id).with_for_update()).all())


def set_scope(
    db: Session, org_id: uuid.UUID, memory_id: uuid.UUID, *, visibility: str, groups: list[str], labels: list[str]
) -> None:
    """Replace one version's stored scope (an ORM UPDATE: a loaded copy of the row follows)."""
    db.execute(
        update(Memory)
        .where(Memory.org_id == org_id, Memory.id == memory_id)
        .values(visibility=visibility, groups=groups, labels=labels)
    )


def main_rows_of_root(db: Session, org_id: uuid.UUID, root_id: uuid.UUID) -> list[Memory]:
    """Main's versions of a root, newest first, whoever may see them (the caller binds
    `every_scope`; promotion checks against them, app/memories/promotion.py), locked."""
    return list(
        db.execute(
            select(Memory)
            .where(Memory.org_id == org_id, Memory.root_id == root_id, Memory.branch_id.is_(None))
            .order_by(Memory.version.desc())
            .with_for_update()
        ).scalars()
    )


def began_in_a_branch(db: Session, org_id: uuid.UUID, root_id: uuid.UUID) -> bool:
    """Whether a root's first version was written in a branch (the caller binds `every_scope`)."""
    return (
        db.execute(select(Memory.id).where(Memory.org_id == org_id, Memory.id == root_id, Memory.branch_id.is_not(None))).first()
        is not None
    )


DERIVING = ("distilled_from", "summarised_from")  # relations whose target is a memory's content source


def roots_derived_from(db: Session, org_id: uuid.UUID, source_type: str, source_ids: list[uuid.UUID]) -> list[uuid.UUID]:
    """Roots of the memories (any version) derived from these sources, locked for the cascade."""
    if not source_ids:
        return []
    from_ids = select(LineageEdge.from_id).where(
        LineageEdge.org_id == org_id,
        LineageEdge.from_type == MEMORY,
        LineageEdge.to_type == source_type,
        LineageEdge.to_id.in_(source_ids),
        LineageEdge.relation.in_(DERIVING),
    )
    rows = db.execute(
        select(Memory.id, Memory.root_id).where(Memory.org_id == org_id, Memory.id.in_(from_ids)).with_for_update()
    ).all()
    return sorted({root for _, root in rows}, key=str)


def live_source_counts(
    db: Session, org_id: uuid.UUID, ids: list[uuid.UUID], *, per: str = "root", relations: tuple[str, ...] = DERIVING
) -> dict[uuid.UUID, int]:
    """How many content sources each memory still has: edges (of `relations`) whose target row
    still exists (`per` as in `content_sources`). One query per source type, not one per edge."""
    edges = set(content_sources(db, org_id, ids, per=per, relations=relations))
    alive = still_existing(db, org_id, {(t, i) for _, t, i in edges})
    counts = {i: 0 for i in ids}
    for k, t, i in edges:
        counts[k] += (t, i) in alive
    return counts


def quarantine_root(db: Session, org_id: uuid.UUID, root_id: uuid.UUID, *, removed_source: uuid.UUID) -> list[uuid.UUID]:
    """Hide the current version(s) of a memory until it is re-derived without a removed source."""
    rows = (
        db.execute(
            select(Memory).where(Memory.org_id == org_id, Memory.root_id == root_id, Memory.status.in_(LIVE)).with_for_update()
        )
        .scalars()
        .all()
    )
    for m in rows:
        m.status = "quarantined"
        m.provenance = {**m.provenance, "pending_rederive": True, "removed_source": str(removed_source)}
    db.flush()
    return [m.id for m in rows]


def add(db: Session, m: Memory) -> None:
    db.add(m)
    db.flush()


def by_key(db: Session, org_id: uuid.UUID, key: str) -> Memory | None:
    """The current version of the memory a pipeline keeps under `provenance.key`, locked."""
    return db.execute(
        select(Memory).where(Memory.org_id == org_id, *_state(db, LIVE), Memory.provenance["key"].astext == key).with_for_update()
    ).scalar_one_or_none()


def active_if_still(db: Session, org_id: uuid.UUID, memory_id: uuid.UUID) -> Memory | None:
    """The memory, locked, if it is still active (another run may have superseded it)."""
    return db.execute(
        select(Memory).where(Memory.org_id == org_id, Memory.id == memory_id, *_state(db, ("active",))).with_for_update()
    ).scalar_one_or_none()


def live_memories(db: Session, org_id: uuid.UUID, *, kind: str | None = None) -> list[Memory]:
    """Every active or quarantined memory of the org (all scopes: jobs bind `all_scopes`), oldest first."""
    stmt = select(Memory).where(Memory.org_id == org_id, *_state(db, LIVE))
    if kind is not None:
        stmt = stmt.where(Memory.kind == kind)
    return list(db.execute(stmt.order_by(Memory.recorded_at)).scalars())


def nearest_active(
    db: Session, org_id: uuid.UUID, *, owner_id: uuid.UUID, visibility: str, groups: list[str], labels: list[str], vec, text: str
) -> tuple[Memory, float] | None:
    """The closest active memory in exactly this scope (exact search: the scope filter is
    selective), the same text first; locked, with its cosine distance."""
    same_scope = and_(
        Memory.owner_id == owner_id,
        Memory.visibility == visibility,
        Memory.groups == sorted(groups),
        Memory.labels == sorted(labels),
    )
    dist = Memory.embedding.cosine_distance(vec)
    same_text = Memory.text.ilike(text.strip())
    row = db.execute(
        select(Memory, dist.label("d"))
        .where(Memory.org_id == org_id, *_state(db, ("active",)), same_scope)
        .order_by(same_text.desc(), dist + 0)
        .limit(1)
        .with_for_update()
    ).first()
    return (row[0], float(row[1])) if row else None


# --- the deletion cascade (app/memories/cascade.py): run under `every_scope`, ids and scopes only ---


def versions_of_roots(db: Session, org_id: uuid.UUID, roots: list[uuid.UUID]) -> list:
    """Every version of these roots, locked: (id, root_id and its scope), never content."""
    if not roots:
        return []
    return db.execute(
        select(Memory.id, Memory.root_id, Memory.org_id, Memory.owner_id, Memory.visibility, Memory.groups, Memory.labels)
        .where(Memory.org_id == org_id, Memory.root_id.in_(roots))
        .with_for_update()
    ).all()


def version_ids_in_view(db: Session, org_id: uuid.UUID, root_id: uuid.UUID) -> list[uuid.UUID]:
    """The versions of a root that the transaction's view holds (in a branch: main's too)."""
    return list(
        db.execute(
            select(Memory.id).where(Memory.org_id == org_id, Memory.root_id == root_id, in_view(view_of(db), Memory))
        ).scalars()
    )


def content_sources(
    db: Session, org_id: uuid.UUID, ids: list[uuid.UUID], *, per: str = "root", relations: tuple[str, ...] = DERIVING
) -> list:
    """(key, source type, source id) of every content-source edge (of `relations`). `per="root"`:
    `ids` are roots, keyed by root, and the edges of all their versions count (the deletion
    cascade); `per="version"`: `ids` are versions and only their own edges count (consolidation's
    prune)."""
    if not ids:
        return []
    key = Memory.root_id if per == "root" else Memory.id
    return db.execute(
        select(key, LineageEdge.to_type, LineageEdge.to_id)
        .join(
            LineageEdge,
            and_(
                LineageEdge.org_id == Memory.org_id,
                LineageEdge.from_type == MEMORY,
                LineageEdge.from_id == Memory.id,
                LineageEdge.relation.in_(relations),
            ),
        )
        .where(Memory.org_id == org_id, key.in_(ids))
    ).all()


def still_existing(db: Session, org_id: uuid.UUID, refs) -> set[tuple[str, uuid.UUID]]:
    """Which (source type, id) pairs of `refs` still exist in the org: one query per source type."""
    by_type: dict[str, set] = {}
    for t, i in refs:
        by_type.setdefault(t, set()).add(i)
    out = set()
    for t, ids in by_type.items():
        if t in SOURCE_TYPES:
            model = model_of(t)
            out |= {(t, i) for i in db.execute(select(model.id).where(model.org_id == org_id, model.id.in_(list(ids)))).scalars()}
    return out


def delete_owned_by(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID) -> list:
    """Delete every version the user owns: (id and its scope) of each, for the cascade that follows."""
    return db.execute(
        delete(Memory)
        .where(Memory.org_id == org_id, Memory.owner_id == owner_id)
        .returning(Memory.id, Memory.org_id, Memory.owner_id, Memory.visibility, Memory.groups, Memory.labels)
    ).all()
