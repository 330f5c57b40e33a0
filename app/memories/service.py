"""Semantic memories through the API: create, get/read, PATCH, DELETE, declassify and an agent's
profile, with the checks each needs (who may share, modify or shape a profile; a memory's scope no
wider than its sources: widening is `declassify`, explicit and audited). Every version is written
through app/memories/versioning.py; deletion follows the cascade in app/memories/lifecycle.py.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.feedback import service as feedback
from app.feedback.schemas import Utility
from app.kit.database.db import view_of
from app.kit.errors import AppError, Conflict, NotFound
from app.kit.runtime.embedding import Embedder
from app.kit.tenancy import scope as scopes
from app.kit.tenancy.access import assert_may_modify, assert_may_shape_profile, assert_may_share
from app.kit.tenancy.repository_view import status_in
from app.kit.tenancy.view import View
from app.memories import repository as repo
from app.memories.lifecycle import delete_root
from app.memories.models import AGENT_KINDS, Memory
from app.memories.schemas import DeclassifyIn, MemoryIn, MemoryOut, MemoryPatch
from app.memories.versioning import create_derived, new_version


class ScopeTooWide(AppError):
    status_code, code = 422, "scope_wider_than_sources"


def to_out(m: Memory, view: View | None = None, *, utility: Utility | None = None) -> MemoryOut:
    """The version as `view` sees it (None: as stored). In a branch, or as of an instant, a version
    superseded later is still the current one: active, not superseded, and still valid if the
    supersession was what closed its validity (`supersede` sets both instants to the same now)."""
    status, superseded_at, valid_to = m.status, m.superseded_at, m.valid_to
    if view is not None and (status := status_in(view, m)) != m.status:
        superseded_at = None
        if valid_to == m.superseded_at:  # closed by the supersession the view does not see
            valid_to = None
    return MemoryOut(
        id=m.id,
        root_id=m.root_id,
        version=m.version,
        status=status,
        text=m.text,
        kind=m.kind,
        confidence=m.confidence,
        provenance=m.provenance,
        owner_id=m.owner_id,
        valid_from=m.valid_from,
        valid_to=valid_to,
        recorded_at=m.recorded_at,
        superseded_at=superseded_at,
        last_validated_at=m.last_validated_at,
        visibility=m.visibility,
        groups=m.groups,
        labels=m.labels,
        agent_id=m.agent_id,
        utility=utility,
    )


def _check_scope(requested: scopes.Scope, bound: scopes.Scope | None) -> None:
    if bound is not None and not scopes.no_wider(requested, bound):
        raise ScopeTooWide(
            f"requested scope is wider than its sources allow (at most {bound.visibility}"
            f"{' ' + ','.join(bound.groups) if bound.groups else ''}, labels {list(bound.labels)}); "
            "narrow it, or declassify explicitly"
        )


def create(db: Session, embedder: Embedder, principal: Principal, body: MemoryIn) -> Memory:
    assert_may_share(principal, body.visibility, body.groups)
    if body.kind in AGENT_KINDS:
        assert_may_shape_profile(principal, body.visibility)
    sources = []
    for ref in body.sources:
        found = repo.visible_sources(db, principal, ref.type, [ref.id])
        if not found:
            raise NotFound(f"source {ref.type} {ref.id} not found")
        sources.append((ref, found[0]))
    requested = scopes.Scope(
        body.visibility, principal.user_id if body.visibility == "private" else None, tuple(body.groups), tuple(body.labels)
    )
    _check_scope(requested, scopes.derive([scopes.of(row) for _, row in sources]))
    now = datetime.now(UTC)
    m = create_derived(
        db,
        org_id=principal.org_id,
        owner_id=principal.user_id,
        text=body.text,
        kind=body.kind,
        confidence=body.confidence,
        provenance={"origin": "api", "sources": [{"type": r.type, "id": str(r.id)} for r, _ in sources]},
        scope=requested,
        embedding=embedder.embed([body.text])[0],
        valid_from=body.valid_from or now,
        now=now,
        sources=[(r.type, r.id) for r, _ in sources],
        agent_id=body.agent_id,
    )
    record(
        db,
        org_id=principal.org_id,
        actor_id=principal.user_id,
        action="memory.create",
        target_type="memory",
        target_id=m.id,
        details={"kind": body.kind, "sources": len(sources), "visibility": body.visibility},
    )
    db.flush()
    return m


def get(db: Session, principal: Principal, memory_id: uuid.UUID) -> Memory:
    m = repo.get_visible(db, principal, memory_id)
    if m is None:
        raise NotFound("memory not found")
    return m


def read(db: Session, principal: Principal, memory_id: uuid.UUID, read=None) -> Memory:
    """GET: the memory, read where `read` says, and recorded as read (app.lineage.service.read_one)."""
    from app.lineage.service import read_one

    return read_one(db, principal, "memory", lambda rdb: get(rdb, principal, memory_id), read)


def read_out(db: Session, principal: Principal, memory_id: uuid.UUID, where=None) -> MemoryOut:
    """GET's body: the memory as the caller's view sees it (read where `where` says, as `read`),
    with its utility once it has feedback."""
    m = read(db, principal, memory_id, where)
    return to_out(m, principal.view, utility=feedback.utility_of(db, principal.org_id, m.id))


def check_may_modify(principal: Principal, m: Memory) -> None:
    assert_may_modify(principal, m, "memory")


def patch(db: Session, embedder: Embedder, principal: Principal, memory_id: uuid.UUID, body: MemoryPatch) -> Memory:
    old = repo.get_visible(db, principal, memory_id, for_update=True)
    if old is None:
        raise NotFound("memory not found")
    check_may_modify(principal, old)
    if (status := status_in(view_of(db), old)) != "active":
        raise Conflict(f"memory is {status}; patch its current version", code="not_current_version")
    changes = body.model_dump(exclude_unset=True)
    if (changes.get("kind", old.kind) in AGENT_KINDS) != (old.kind in AGENT_KINDS):
        raise AppError(
            "an agent's instruction or skill stays one (and another memory cannot become one)",
            code="validation_error",
            status_code=422,
        )
    visibility = changes.get("visibility", old.visibility)
    groups = sorted(set(changes.get("groups", old.groups if visibility == "group" else [])))
    labels = sorted(set(changes.get("labels", old.labels)))
    if visibility == "group" and not groups:
        raise AppError("visibility 'group' needs at least one group", code="validation_error", status_code=422)
    if visibility != "group":
        groups = []
    if "groups" in changes or "visibility" in changes:
        assert_may_share(principal, visibility, groups)
    if old.kind in AGENT_KINDS:
        assert_may_shape_profile(principal, visibility, owner_id=old.owner_id)
    # A new version may not be wider than the old one: widening is `declassify`.
    requested = scopes.Scope(visibility, old.owner_id if visibility == "private" else None, tuple(groups), tuple(labels))
    _check_scope(requested, scopes.of(old))
    now = datetime.now(UTC)
    text_ = changes.get("text", old.text)
    changed = text_ != old.text
    new = new_version(
        db,
        old,
        now=now,
        provenance={**old.provenance, "previous_version": str(old.id)},
        valid_from=now if changed else old.valid_from,
        last_validated_at=now,
        close_validity=changed,
        text=text_,
        kind=changes.get("kind", old.kind),
        confidence=changes.get("confidence", old.confidence),
        visibility=visibility,
        groups=groups,
        labels=labels,
        writer=principal,
        embedding=embedder.embed([text_])[0] if changed else old.embedding,
    )
    record(
        db,
        org_id=old.org_id,
        actor_id=principal.user_id,
        action="memory.update",
        target_type="memory",
        target_id=new.id,
        details={"previous": str(old.id), "version": new.version, "fields": sorted(changes)},
    )
    return new


def delete(db: Session, principal: Principal, memory_id: uuid.UUID) -> None:
    remove(db, principal, repo.get_visible(db, principal, memory_id, for_update=True))


def remove(db: Session, principal: Principal, m: Memory | None) -> None:
    """DELETE of `m` as found for the principal (None: 404): every version in this branch, and the
    cascade from it (app/memories/lifecycle.py `delete_root`)."""
    if m is None:
        raise NotFound("memory not found")
    check_may_modify(principal, m)
    ids = delete_root(db, m.org_id, m.root_id, actor_id=principal.user_id)
    record(
        db,
        org_id=m.org_id,
        actor_id=principal.user_id,
        action="memory.delete",
        target_type="memory",
        target_id=m.id,
        details={"versions_removed": [str(i) for i in ids]},
    )


def agent_profile(db: Session, principal: Principal, agent_id: str) -> list[Memory]:
    """An agent's current instructions and skills in the principal's view (branch, as of)."""
    return repo.agent_profile(db, principal, agent_id)


def declassify(db: Session, principal: Principal, memory_id: uuid.UUID, body: DeclassifyIn) -> Memory:
    """Widen (or change) a memory's scope explicitly: a new version, `declassified_from` lineage
    to the old one, and an audit event with the reason. Stewards and admins only (casbin)."""
    old = repo.get_visible(db, principal, memory_id, for_update=True)
    if old is None:
        raise NotFound("memory not found")
    if (status := status_in(view_of(db), old)) != "active":
        raise Conflict(f"memory is {status}; declassify its current version", code="not_current_version")
    assert_may_share(principal, body.visibility, body.groups)
    new = new_version(
        db,
        old,
        now=datetime.now(UTC),
        relation="declassified_from",
        close_validity=False,
        provenance={
            **old.provenance,
            "previous_version": str(old.id),
            "declassified": {
                "by": str(principal.user_id),
                "reason": body.reason,
                "from": {"visibility": old.visibility, "groups": old.groups, "labels": old.labels},
            },
        },
        valid_from=old.valid_from,
        last_validated_at=old.last_validated_at,
        writer=principal,
        visibility=body.visibility,
        groups=body.groups,
        labels=body.labels,
    )
    record(
        db,
        org_id=old.org_id,
        actor_id=principal.user_id,
        action="memory.declassify",
        target_type="memory",
        target_id=new.id,
        details={
            "previous": str(old.id),
            "reason": body.reason,
            "from": {"visibility": old.visibility, "groups": old.groups, "labels": old.labels},
            "to": {"visibility": new.visibility, "groups": new.groups, "labels": new.labels},
        },
    )
    return new
