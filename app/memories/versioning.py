"""The one versioning path of semantic memories, used by the API (create, PATCH, declassify),
distillation, consolidation, bootstrap and branch promotion alike: `create_derived` writes version 1
with lineage to its sources, `new_version` writes version n+1 and supersedes n (`supersedes` /
`declassified_from` lineage) and narrows the root's history to its scope, `supersede` retires a
version. A `Memory(...)` row is built only in `_row`. Pipelines keep memories in step with their
sources through `upsert_derived` and `confirm` (revalidated, no new version, when nothing changed)
and `resolve` (consolidation: one memory supersedes another).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.kit.database.db import every_scope, is_below, view_of
from app.kit.runtime.embedding import Embedder
from app.kit.tenancy import scope as scopes
from app.kit.tenancy.access import can_see
from app.kit.tenancy.repository_view import add_mask
from app.lineage.service import add_edge
from app.memories import repository as repo
from app.memories.models import Memory
from app.memories.narrowing import narrow_history


def _row(
    db: Session,
    *,
    root_id: uuid.UUID | None,
    version: int,
    org_id: uuid.UUID,
    owner_id: uuid.UUID,
    text: str,
    kind: str,
    confidence: float,
    provenance: dict,
    visibility: str,
    groups,
    labels,
    embedding,
    valid_from: datetime,
    recorded_at: datetime,
    last_validated_at: datetime,
    agent_id: str | None = None,
) -> Memory:
    """A new version row, written in the transaction's branch (main: NULL)."""
    mid = uuid.uuid4()
    return Memory(
        id=mid,
        root_id=root_id or mid,
        version=version,
        org_id=org_id,
        owner_id=owner_id,
        text=text,
        kind=kind,
        status="active",
        confidence=confidence,
        provenance=provenance,
        valid_from=valid_from,
        recorded_at=recorded_at,
        last_validated_at=last_validated_at,
        visibility=visibility,
        groups=list(groups),
        labels=list(labels),
        embedding=embedding,
        branch_id=view_of(db).branch_id,
        agent_id=agent_id,
    )


def _link(db: Session, m: Memory, sources, relation: str, job_id: uuid.UUID | None) -> None:
    for type_, id_ in sources:
        add_edge(
            db, org_id=m.org_id, from_type="memory", from_id=m.id, to_type=type_, to_id=id_, relation=relation, job_id=job_id
        )


def create_derived(
    db: Session,
    *,
    org_id: uuid.UUID,
    owner_id: uuid.UUID,
    text: str,
    kind: str,
    confidence: float,
    provenance: dict,
    scope: scopes.Scope,
    embedding,
    valid_from: datetime,
    now: datetime,
    sources=(),
    relation: str = "distilled_from",
    job_id: uuid.UUID | None = None,
    agent_id: str | None = None,
) -> Memory:
    """Version 1 of a memory, with a `relation` edge to each (type, id) source."""
    m = _row(
        db,
        root_id=None,
        version=1,
        org_id=org_id,
        owner_id=owner_id,
        text=text,
        kind=kind,
        confidence=confidence,
        provenance=provenance,
        visibility=scope.visibility,
        groups=scope.groups,
        labels=scope.labels,
        embedding=embedding,
        valid_from=valid_from,
        recorded_at=now,
        last_validated_at=now,
        agent_id=agent_id,
    )
    repo.add(db, m)
    _link(db, m, sources, relation, job_id)
    return m


def supersede(db: Session, old: Memory, now: datetime, *, close_validity: bool) -> None:
    """Retire a version: known to the system until `now`; with `close_validity`, also no longer
    true in the world from `now` (its text was replaced or contradicted, not merely restated).
    In a branch, a version of a layer below (main, a parent branch) is not touched: the branch
    masks its root from `now` on (app/kit/tenancy/view.py), and its own new version, if any, shows."""
    if is_below(db, old):
        add_mask(db, org_id=old.org_id, branch_id=view_of(db).branch_id, item_type="memories", key=old.root_id, at=now)
        return
    old.status, old.superseded_at = "superseded", now
    if close_validity:
        old.valid_to = now


_VERSIONED = ("owner_id", "text", "kind", "confidence", "visibility", "groups", "labels", "embedding", "agent_id")


def new_version(
    db: Session,
    old: Memory,
    *,
    now: datetime,
    provenance: dict,
    valid_from: datetime,
    last_validated_at: datetime,
    close_validity: bool,
    relation: str = "supersedes",
    job_id: uuid.UUID | None = None,
    sources=(),
    source_relation: str = "distilled_from",
    writer: Principal | None = None,
    **fields,
) -> Memory:
    """Version n+1 of `old` (fields not given are kept), which it supersedes; lineage `relation`
    from the new version to the old, and `source_relation` to each of `sources`. Every other
    version of the root, in every branch, is narrowed to its scope (app/memories/narrowing.py).
    `writer`: who asked; a steward may make a memory narrower than it can itself see (another's
    private), so such a row is inserted with the RLS scope widened (RLS checks an INSERT's
    returned row against its read rule)."""
    values = {f: getattr(old, f) for f in _VERSIONED} | fields
    new = _row(
        db,
        root_id=old.root_id,
        version=old.version + 1,
        org_id=old.org_id,
        provenance=provenance,
        valid_from=valid_from,
        recorded_at=now,
        last_validated_at=last_validated_at,
        **values,
    )
    supersede(db, old, now, close_validity=close_validity)
    db.flush()  # the old row leaves 'active' before the new one enters
    if writer is not None and not can_see(
        writer, org_id=new.org_id, owner_id=new.owner_id, visibility=new.visibility, groups=new.groups, labels=new.labels
    ):
        with every_scope(db):
            repo.add(db, new)
    else:
        repo.add(db, new)
    _link(db, new, sources, source_relation, job_id)
    add_edge(
        db,
        org_id=old.org_id,
        from_type="memory",
        from_id=new.id,
        to_type="memory",
        to_id=old.id,
        relation=relation,
        job_id=job_id,
    )
    narrow_history(db, new, actor_id=writer.user_id if writer else None)
    return new


def upsert_derived(
    db: Session,
    embedder: Embedder,
    *,
    org_id: uuid.UUID,
    owner_id: uuid.UUID,
    key: str,
    text: str,
    kind: str,
    scope: scopes.Scope,
    sources: list[tuple[str, uuid.UUID]],
    provenance: dict,
    relation: str = "distilled_from",
    job_id: uuid.UUID | None = None,
    confidence: float = 0.9,
) -> tuple[str, Memory]:
    """A memory a pipeline keeps in step with a source (schema hints, glossary terms), found by
    `provenance.key`. Same text: revalidated; new text: a new version supersedes the old, never
    wider than it (a steward's narrowing holds; widening is `declassify`'s)."""
    now = datetime.now(UTC)
    old = repo.by_key(db, org_id, key)
    if old is not None and old.text == text and old.status == "active":
        _validated(db, old, now)
        return "unchanged", old
    provenance = {**provenance, "key": key, "job_id": str(job_id) if job_id else None}
    fields = dict(
        owner_id=owner_id,
        text=text,
        kind=kind,
        confidence=confidence,
        provenance=provenance,
        now=now,
        embedding=embedder.embed([text])[0],
        valid_from=now,
        sources=sources,
        job_id=job_id,
    )
    if old is None:
        new = create_derived(db, org_id=org_id, scope=scope, relation=relation, **fields)
    else:
        scope = scopes.meet(scope, scopes.of(old), owner_id=owner_id)
        new = new_version(
            db,
            old,
            last_validated_at=now,
            close_validity=True,
            source_relation=relation,
            visibility=scope.visibility,
            groups=list(scope.groups),
            labels=list(scope.labels),
            **fields,
        )
    record(
        db,
        org_id=org_id,
        actor_id=None,
        action="memory.derive",
        target_type="memory",
        target_id=new.id,
        details={"key": key, "kind": kind, "previous": str(old.id) if old else None, "job_id": str(job_id) if job_id else None},
    )
    return ("updated" if old else "created"), new


def confirm(db: Session, m: Memory, *, sources, relation: str = "distilled_from", job_id: uuid.UUID | None = None) -> None:
    """New sources say what `m` already says: validated now, with lineage to them (no new version)."""
    _validated(db, m, datetime.now(UTC))
    _link(db, m, sources, relation, job_id)


def _validated(db: Session, m: Memory, now: datetime) -> None:
    if not is_below(db, m):  # a branch's confirmation of a base row lives in its lineage edges
        m.last_validated_at = now


def resolve(
    db: Session,
    *,
    org_id: uuid.UUID,
    winner_id: uuid.UUID,
    loser_id: uuid.UUID,
    relation: str,
    job_id: uuid.UUID | None,
    now: datetime,
) -> bool:
    """Consolidation: `loser` is superseded by `winner` (`merged_from`: it said the same;
    `supersedes`: it contradicted it, so it also stops being valid). False when the loser is no
    longer active (a concurrent run got there first)."""
    loser = repo.active_if_still(db, org_id, loser_id)
    if loser is None:
        return False
    supersede(db, loser, now, close_validity=relation == "supersedes")
    add_edge(
        db,
        org_id=org_id,
        from_type="memory",
        from_id=winner_id,
        to_type="memory",
        to_id=loser_id,
        relation=relation,
        job_id=job_id,
    )
    record(
        db,
        org_id=org_id,
        actor_id=None,
        action=f"memory.{'merge' if relation == 'merged_from' else 'supersede'}",
        target_type="memory",
        target_id=loser_id,
        details={"winner": str(winner_id), "job_id": str(job_id)},
    )
    return True
