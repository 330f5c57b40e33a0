"""Semantic memories: versioned, bi-temporal, scoped no wider than their sources."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.kit import scope as scopes
from app.kit.embedding import Embedder
from app.kit.access import assert_may_modify, assert_may_share
from app.kit.errors import AppError, Conflict, NotFound
from app.lineage.service import add_edge
from app.memories import repository as repo
from app.memories.models import Memory
from app.memories.schemas import DeclassifyIn, MemoryIn, MemoryOut, MemoryPatch


class ScopeTooWide(AppError):
    status_code, code = 422, "scope_wider_than_sources"


def to_out(m: Memory) -> MemoryOut:
    return MemoryOut(id=m.id, root_id=m.root_id, version=m.version, status=m.status, text=m.text, kind=m.kind,
                     confidence=m.confidence, provenance=m.provenance, owner_id=m.owner_id,
                     valid_from=m.valid_from, valid_to=m.valid_to, recorded_at=m.recorded_at,
                     superseded_at=m.superseded_at, last_validated_at=m.last_validated_at,
                     visibility=m.visibility, groups=m.groups, labels=m.labels)


def _check_scope(requested: scopes.Scope, bound: scopes.Scope | None) -> None:
    if bound is not None and not scopes.no_wider(requested, bound):
        raise ScopeTooWide(
            f"requested scope is wider than its sources allow (at most {bound.visibility}"
            f"{' ' + ','.join(bound.groups) if bound.groups else ''}, labels {list(bound.labels)}); "
            "narrow it, or declassify explicitly")


def create(db: Session, embedder: Embedder, principal: Principal, body: MemoryIn) -> Memory:
    assert_may_share(principal, body.visibility, body.groups)
    sources = []
    for ref in body.sources:
        found = repo.visible_sources(db, principal, ref.type, [ref.id])
        if not found:
            raise NotFound(f"source {ref.type} {ref.id} not found")
        sources.append((ref, found[0]))
    requested = scopes.Scope(body.visibility, principal.user_id if body.visibility == "private" else None,
                             tuple(body.groups), tuple(body.labels))
    _check_scope(requested, scopes.derive([scopes.of(row) for _, row in sources]))
    vec = embedder.embed([body.text])[0]
    now = datetime.now(timezone.utc)
    mid = uuid.uuid4()
    m = Memory(id=mid, root_id=mid, version=1, org_id=principal.org_id, owner_id=principal.user_id, text=body.text,
               kind=body.kind, status="active", confidence=body.confidence,
               provenance={"origin": "api", "sources": [{"type": r.type, "id": str(r.id)} for r, _ in sources]},
               valid_from=body.valid_from or now, recorded_at=now, last_validated_at=now,
               visibility=body.visibility, groups=body.groups, labels=body.labels, embedding=vec)
    db.add(m)
    db.flush()
    for ref, _ in sources:
        add_edge(db, org_id=principal.org_id, from_type="memory", from_id=mid, to_type=ref.type, to_id=ref.id,
                 relation="distilled_from")
    record(db, org_id=principal.org_id, actor_id=principal.user_id, action="memory.create", target_type="memory",
           target_id=mid, details={"kind": body.kind, "sources": len(sources), "visibility": body.visibility})
    db.flush()
    return m


def get(db: Session, principal: Principal, memory_id: uuid.UUID) -> Memory:
    m = repo.get_visible(db, principal, memory_id)
    if m is None:
        raise NotFound("memory not found")
    return m


def read(db: Session, principal: Principal, memory_id: uuid.UUID, read=None) -> Memory:  # noqa: ANN001
    """GET: the memory (read where `read` says: a replica, app.kit.replicas), and a retrieval record
    that the caller read its content (written in `db`)."""
    from app.kit.replicas import on
    from app.lineage.service import record_read

    m = (read or on(db))(lambda rdb: get(rdb, principal, memory_id))
    record_read(db, principal, "get", "memory", m.id)
    return m


def _may_modify(principal: Principal, m: Memory) -> None:
    assert_may_modify(principal, m, "memory")


def patch(db: Session, embedder: Embedder, principal: Principal, memory_id: uuid.UUID, body: MemoryPatch) -> Memory:
    old = repo.get_visible(db, principal, memory_id, for_update=True)
    if old is None:
        raise NotFound("memory not found")
    _may_modify(principal, old)
    if old.status != "active":
        raise Conflict(f"memory is {old.status}; patch its current version", code="not_current_version")
    changes = body.model_dump(exclude_unset=True)
    visibility = changes.get("visibility", old.visibility)
    groups = sorted(set(changes.get("groups", old.groups if visibility == "group" else [])))
    labels = sorted(set(changes.get("labels", old.labels)))
    if visibility == "group" and not groups:
        raise AppError("visibility 'group' needs at least one group", code="validation_error", status_code=422)
    if visibility != "group":
        groups = []
    if "groups" in changes or "visibility" in changes:
        assert_may_share(principal, visibility, groups)
    # A new version may not be wider than the old one: widening is `declassify`.
    requested = scopes.Scope(visibility, old.owner_id if visibility == "private" else None, tuple(groups), tuple(labels))
    _check_scope(requested, scopes.of(old))
    now = datetime.now(timezone.utc)
    text_ = changes.get("text", old.text)
    vec = embedder.embed([text_])[0] if text_ != old.text else old.embedding
    new = Memory(id=uuid.uuid4(), root_id=old.root_id, version=old.version + 1, org_id=old.org_id,
                 owner_id=old.owner_id, text=text_, kind=changes.get("kind", old.kind), status="active",
                 confidence=changes.get("confidence", old.confidence),
                 provenance={**old.provenance, "previous_version": str(old.id)},
                 valid_from=now if text_ != old.text else old.valid_from, recorded_at=now, last_validated_at=now,
                 visibility=visibility, groups=groups, labels=labels, embedding=vec)
    old.status = "superseded"
    old.superseded_at = now
    if text_ != old.text:
        old.valid_to = now
    db.flush()  # the old row leaves 'active' before the new one enters
    db.add(new)
    db.flush()
    add_edge(db, org_id=old.org_id, from_type="memory", from_id=new.id, to_type="memory", to_id=old.id,
             relation="supersedes")
    record(db, org_id=old.org_id, actor_id=principal.user_id, action="memory.update", target_type="memory",
           target_id=new.id, details={"previous": str(old.id), "version": new.version, "fields": sorted(changes)})
    return new


def delete(db: Session, principal: Principal, memory_id: uuid.UUID) -> None:
    m = repo.get_visible(db, principal, memory_id, for_update=True)
    if m is None:
        raise NotFound("memory not found")
    _may_modify(principal, m)
    ids = repo.delete_root(db, m.org_id, m.root_id)
    record(db, org_id=m.org_id, actor_id=principal.user_id, action="memory.delete", target_type="memory",
           target_id=memory_id, details={"versions_removed": [str(i) for i in ids]})


def upsert_derived(db: Session, embedder: Embedder, *, org_id: uuid.UUID, owner_id: uuid.UUID, key: str, text: str,
                   kind: str, scope: scopes.Scope, sources: list[tuple[str, uuid.UUID]], provenance: dict,
                   relation: str = "distilled_from", job_id: uuid.UUID | None = None,
                   confidence: float = 0.9) -> tuple[str, Memory]:
    """A memory a pipeline keeps in step with a source (schema hints, glossary terms), found by
    `provenance.key`. Same text: revalidated; new text: a new version supersedes the old."""
    from sqlalchemy import select

    now = datetime.now(timezone.utc)
    old = db.execute(select(Memory).where(Memory.org_id == org_id, Memory.status.in_(("active", "quarantined")),
                                          Memory.provenance["key"].astext == key).with_for_update()).scalar_one_or_none()
    if old is not None and old.text == text and old.status == "active":
        old.last_validated_at = now
        return "unchanged", old
    mid = uuid.uuid4()
    new = Memory(id=mid, root_id=old.root_id if old else mid, version=old.version + 1 if old else 1, org_id=org_id,
                 owner_id=owner_id, text=text, kind=kind, status="active", confidence=confidence,
                 provenance={**provenance, "key": key, "job_id": str(job_id) if job_id else None},
                 valid_from=now, recorded_at=now, last_validated_at=now, visibility=scope.visibility,
                 groups=list(scope.groups), labels=list(scope.labels), embedding=embedder.embed([text])[0])
    if old is not None:
        old.status, old.superseded_at, old.valid_to = "superseded", now, now
        db.flush()
    db.add(new)
    db.flush()
    for type_, id_ in sources:
        add_edge(db, org_id=org_id, from_type="memory", from_id=mid, to_type=type_, to_id=id_, relation=relation,
                 job_id=job_id)
    if old is not None:
        add_edge(db, org_id=org_id, from_type="memory", from_id=mid, to_type="memory", to_id=old.id,
                 relation="supersedes", job_id=job_id)
    record(db, org_id=org_id, actor_id=None, action="memory.derive", target_type="memory", target_id=mid,
           details={"key": key, "kind": kind, "previous": str(old.id) if old else None,
                    "job_id": str(job_id) if job_id else None})
    return ("updated" if old else "created"), new


def declassify(db: Session, principal: Principal, memory_id: uuid.UUID, body: DeclassifyIn) -> Memory:
    """Widen (or change) a memory's scope explicitly: a new version, `declassified_from` lineage
    to the old one, and an audit event with the reason. Stewards and admins only (casbin)."""
    old = repo.get_visible(db, principal, memory_id, for_update=True)
    if old is None:
        raise NotFound("memory not found")
    if old.status != "active":
        raise Conflict(f"memory is {old.status}; declassify its current version", code="not_current_version")
    assert_may_share(principal, body.visibility, body.groups)
    now = datetime.now(timezone.utc)
    new = Memory(id=uuid.uuid4(), root_id=old.root_id, version=old.version + 1, org_id=old.org_id,
                 owner_id=old.owner_id, text=old.text, kind=old.kind, status="active", confidence=old.confidence,
                 provenance={**old.provenance, "previous_version": str(old.id),
                             "declassified": {"by": str(principal.user_id), "reason": body.reason,
                                              "from": {"visibility": old.visibility, "groups": old.groups,
                                                       "labels": old.labels}}},
                 valid_from=old.valid_from, recorded_at=now, last_validated_at=old.last_validated_at,
                 visibility=body.visibility, groups=body.groups, labels=body.labels, embedding=old.embedding)
    old.status, old.superseded_at = "superseded", now
    db.flush()
    db.add(new)
    db.flush()
    add_edge(db, org_id=old.org_id, from_type="memory", from_id=new.id, to_type="memory", to_id=old.id,
             relation="declassified_from")
    record(db, org_id=old.org_id, actor_id=principal.user_id, action="memory.declassify", target_type="memory",
           target_id=new.id, details={"previous": str(old.id), "reason": body.reason,
                                      "from": {"visibility": old.visibility, "groups": old.groups, "labels": old.labels},
                                      "to": {"visibility": new.visibility, "groups": new.groups, "labels": new.labels}})
    return new
