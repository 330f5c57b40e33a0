"""Semantic memories: versioned, bi-temporal, scoped no wider than their sources.

One versioning path, used by the API (create, PATCH, declassify), distillation, consolidation and
bootstrap alike: `create_derived` writes version 1 with lineage to its sources, `new_version`
writes version n+1 and supersedes n (`supersedes` / `declassified_from` lineage), `supersede`
retires a version. A `Memory(...)` row is built only in `_row`.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.kit import scope as scopes
from app.kit.embedding import Embedder
from app.kit.access import assert_may_modify, assert_may_shape_profile, assert_may_share, can_see
from app.kit.db import every_scope, is_below, view_of
from app.kit.repository_view import add_mask, status_in
from app.kit.view import View
from app.kit.errors import AppError, Conflict, NotFound
from app.lineage.service import add_edge
from app.memories import cascade, repository as repo
from app.memories.models import AGENT_KINDS, Memory
from app.memories.narrowing import narrow_history
from app.memories.schemas import DeclassifyIn, MemoryIn, MemoryOut, MemoryPatch


class ScopeTooWide(AppError):
    status_code, code = 422, "scope_wider_than_sources"


def to_out(m: Memory, view: View | None = None) -> MemoryOut:
    """The version as `view` sees it (None: as stored). In a branch, or as of an instant, a version
    superseded later is still the current one: active, not superseded, and still valid if the
    supersession was what closed its validity (`supersede` sets both instants to the same now)."""
    status, superseded_at, valid_to = m.status, m.superseded_at, m.valid_to
    if view is not None and (status := status_in(view, m)) != m.status:
        superseded_at = None
        if valid_to == m.superseded_at:  # closed by the supersession the view does not see
            valid_to = None
    return MemoryOut(id=m.id, root_id=m.root_id, version=m.version, status=status, text=m.text, kind=m.kind,
                     confidence=m.confidence, provenance=m.provenance, owner_id=m.owner_id,
                     valid_from=m.valid_from, valid_to=valid_to, recorded_at=m.recorded_at,
                     superseded_at=superseded_at, last_validated_at=m.last_validated_at,
                     visibility=m.visibility, groups=m.groups, labels=m.labels, agent_id=m.agent_id)


def _check_scope(requested: scopes.Scope, bound: scopes.Scope | None) -> None:
    if bound is not None and not scopes.no_wider(requested, bound):
        raise ScopeTooWide(
            f"requested scope is wider than its sources allow (at most {bound.visibility}"
            f"{' ' + ','.join(bound.groups) if bound.groups else ''}, labels {list(bound.labels)}); "
            "narrow it, or declassify explicitly")


def _row(db: Session, *, root_id: uuid.UUID | None, version: int, org_id: uuid.UUID, owner_id: uuid.UUID, text: str,
         kind: str, confidence: float, provenance: dict, visibility: str, groups, labels, embedding,  # noqa: ANN001
         valid_from: datetime, recorded_at: datetime, last_validated_at: datetime, agent_id: str | None = None) -> Memory:
    """A new version row, written in the transaction's branch (main: NULL)."""
    mid = uuid.uuid4()
    return Memory(id=mid, root_id=root_id or mid, version=version, org_id=org_id, owner_id=owner_id, text=text,
                  kind=kind, status="active", confidence=confidence, provenance=provenance, valid_from=valid_from,
                  recorded_at=recorded_at, last_validated_at=last_validated_at, visibility=visibility,
                  groups=list(groups), labels=list(labels), embedding=embedding, branch_id=view_of(db).branch_id,
                  agent_id=agent_id)


def _link(db: Session, m: Memory, sources, relation: str, job_id: uuid.UUID | None) -> None:  # noqa: ANN001
    for type_, id_ in sources:
        add_edge(db, org_id=m.org_id, from_type="memory", from_id=m.id, to_type=type_, to_id=id_, relation=relation,
                 job_id=job_id)


def create_derived(db: Session, *, org_id: uuid.UUID, owner_id: uuid.UUID, text: str, kind: str, confidence: float,
                   provenance: dict, scope: scopes.Scope, embedding, valid_from: datetime, now: datetime,  # noqa: ANN001
                   sources=(), relation: str = "distilled_from", job_id: uuid.UUID | None = None,  # noqa: ANN001
                   agent_id: str | None = None) -> Memory:
    """Version 1 of a memory, with a `relation` edge to each (type, id) source."""
    m = _row(db, root_id=None, version=1, org_id=org_id, owner_id=owner_id, text=text, kind=kind, confidence=confidence,
             provenance=provenance, visibility=scope.visibility, groups=scope.groups, labels=scope.labels,
             embedding=embedding, valid_from=valid_from, recorded_at=now, last_validated_at=now, agent_id=agent_id)
    repo.add(db, m)
    _link(db, m, sources, relation, job_id)
    return m


def supersede(db: Session, old: Memory, now: datetime, *, close_validity: bool) -> None:
    """Retire a version: known to the system until `now`; with `close_validity`, also no longer
    true in the world from `now` (its text was replaced or contradicted, not merely restated).
    In a branch, a version of a layer below (main, a parent branch) is not touched: the branch
    masks its root from `now` on (app/kit/view.py), and its own new version, if any, shows."""
    if is_below(db, old):
        add_mask(db, org_id=old.org_id, branch_id=view_of(db).branch_id, item_type="memories", key=old.root_id, at=now)
        return
    old.status, old.superseded_at = "superseded", now
    if close_validity:
        old.valid_to = now


_VERSIONED = ("owner_id", "text", "kind", "confidence", "visibility", "groups", "labels", "embedding", "agent_id")


def new_version(db: Session, old: Memory, *, now: datetime, provenance: dict, valid_from: datetime,
                last_validated_at: datetime, close_validity: bool, relation: str = "supersedes",
                job_id: uuid.UUID | None = None, sources=(), source_relation: str = "distilled_from",  # noqa: ANN001
                writer: Principal | None = None, **fields) -> Memory:  # noqa: ANN003
    """Version n+1 of `old` (fields not given are kept), which it supersedes; lineage `relation`
    from the new version to the old, and `source_relation` to each of `sources`. Every other
    version of the root, in every branch, is narrowed to its scope (app/memories/narrowing.py).
    `writer`: who asked; a steward may make a memory narrower than it can itself see (another's
    private), so such a row is inserted with the RLS scope widened (RLS checks an INSERT's
    returned row against its read rule)."""
    values = {f: getattr(old, f) for f in _VERSIONED} | fields
    new = _row(db, root_id=old.root_id, version=old.version + 1, org_id=old.org_id, provenance=provenance,
               valid_from=valid_from, recorded_at=now, last_validated_at=last_validated_at, **values)
    supersede(db, old, now, close_validity=close_validity)
    db.flush()  # the old row leaves 'active' before the new one enters
    if writer is not None and not can_see(writer, org_id=new.org_id, owner_id=new.owner_id, visibility=new.visibility,
                                          groups=new.groups, labels=new.labels):
        with every_scope(db):
            repo.add(db, new)
    else:
        repo.add(db, new)
    _link(db, new, sources, source_relation, job_id)
    add_edge(db, org_id=old.org_id, from_type="memory", from_id=new.id, to_type="memory", to_id=old.id,
             relation=relation, job_id=job_id)
    narrow_history(db, new, actor_id=writer.user_id if writer else None)
    return new


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
    requested = scopes.Scope(body.visibility, principal.user_id if body.visibility == "private" else None,
                             tuple(body.groups), tuple(body.labels))
    _check_scope(requested, scopes.derive([scopes.of(row) for _, row in sources]))
    now = datetime.now(timezone.utc)
    m = create_derived(db, org_id=principal.org_id, owner_id=principal.user_id, text=body.text, kind=body.kind,
                       confidence=body.confidence,
                       provenance={"origin": "api", "sources": [{"type": r.type, "id": str(r.id)} for r, _ in sources]},
                       scope=requested, embedding=embedder.embed([body.text])[0], valid_from=body.valid_from or now,
                       now=now, sources=[(r.type, r.id) for r, _ in sources], agent_id=body.agent_id)
    record(db, org_id=principal.org_id, actor_id=principal.user_id, action="memory.create", target_type="memory",
           target_id=m.id, details={"kind": body.kind, "sources": len(sources), "visibility": body.visibility})
    db.flush()
    return m


def get(db: Session, principal: Principal, memory_id: uuid.UUID) -> Memory:
    m = repo.get_visible(db, principal, memory_id)
    if m is None:
        raise NotFound("memory not found")
    return m


def read(db: Session, principal: Principal, memory_id: uuid.UUID, read=None) -> Memory:  # noqa: ANN001
    """GET: the memory, read where `read` says, and recorded as read (app.lineage.service.read_one)."""
    from app.lineage.service import read_one

    return read_one(db, principal, "memory", lambda rdb: get(rdb, principal, memory_id), read)


def _may_modify(principal: Principal, m: Memory) -> None:
    assert_may_modify(principal, m, "memory")


def patch(db: Session, embedder: Embedder, principal: Principal, memory_id: uuid.UUID, body: MemoryPatch) -> Memory:
    old = repo.get_visible(db, principal, memory_id, for_update=True)
    if old is None:
        raise NotFound("memory not found")
    _may_modify(principal, old)
    if (status := status_in(view_of(db), old)) != "active":
        raise Conflict(f"memory is {status}; patch its current version", code="not_current_version")
    changes = body.model_dump(exclude_unset=True)
    if (changes.get("kind", old.kind) in AGENT_KINDS) != (old.kind in AGENT_KINDS):
        raise AppError("an agent's instruction or skill stays one (and another memory cannot become one)",
                       code="validation_error", status_code=422)
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
    now = datetime.now(timezone.utc)
    text_ = changes.get("text", old.text)
    changed = text_ != old.text
    new = new_version(db, old, now=now, provenance={**old.provenance, "previous_version": str(old.id)},
                      valid_from=now if changed else old.valid_from, last_validated_at=now, close_validity=changed,
                      text=text_, kind=changes.get("kind", old.kind), confidence=changes.get("confidence", old.confidence),
                      visibility=visibility, groups=groups, labels=labels, writer=principal,
                      embedding=embedder.embed([text_])[0] if changed else old.embedding)
    record(db, org_id=old.org_id, actor_id=principal.user_id, action="memory.update", target_type="memory",
           target_id=new.id, details={"previous": str(old.id), "version": new.version, "fields": sorted(changes)})
    return new


def delete(db: Session, principal: Principal, memory_id: uuid.UUID) -> None:
    _remove(db, principal, repo.get_visible(db, principal, memory_id, for_update=True))


def _remove(db: Session, principal: Principal, m: Memory | None) -> None:
    if m is None:
        raise NotFound("memory not found")
    _may_modify(principal, m)
    ids = _delete_root(db, m.org_id, m.root_id, actor_id=principal.user_id)
    record(db, org_id=m.org_id, actor_id=principal.user_id, action="memory.delete", target_type="memory",
           target_id=m.id, details={"versions_removed": [str(i) for i in ids]})


def _delete_root(db: Session, org_id: uuid.UUID, root_id: uuid.UUID, *,
                 actor_id: uuid.UUID | None = None) -> list[uuid.UUID]:
    """Every version of a memory in this transaction's branch (app/memories/cascade.py
    `delete_versions`), then whatever was derived from it, whoever may see that: removed or
    quarantined (a `memory.cascade` audit event lists the ids). Returns the memory's own ids."""
    ids, reached = cascade.delete_root(db, org_id, root_id)
    if reached:
        record(db, org_id=org_id, actor_id=actor_id, action="memory.cascade", target_type="memory",
               target_id=root_id, details=reached.audit())
    return ids


def agent_profile(db: Session, principal: Principal, agent_id: str) -> list[Memory]:
    """An agent's current instructions and skills in the principal's view (branch, as of)."""
    return repo.agent_profile(db, principal, agent_id)


def upsert_derived(db: Session, embedder: Embedder, *, org_id: uuid.UUID, owner_id: uuid.UUID, key: str, text: str,
                   kind: str, scope: scopes.Scope, sources: list[tuple[str, uuid.UUID]], provenance: dict,
                   relation: str = "distilled_from", job_id: uuid.UUID | None = None,
                   confidence: float = 0.9) -> tuple[str, Memory]:
    """A memory a pipeline keeps in step with a source (schema hints, glossary terms), found by
    `provenance.key`. Same text: revalidated; new text: a new version supersedes the old, never
    wider than it (a steward's narrowing holds; widening is `declassify`'s)."""
    now = datetime.now(timezone.utc)
    old = repo.by_key(db, org_id, key)
    if old is not None and old.text == text and old.status == "active":
        _validated(db, old, now)
        return "unchanged", old
    provenance = {**provenance, "key": key, "job_id": str(job_id) if job_id else None}
    fields = dict(owner_id=owner_id, text=text, kind=kind, confidence=confidence, provenance=provenance, now=now,
                  embedding=embedder.embed([text])[0], valid_from=now, sources=sources, job_id=job_id)
    if old is None:
        new = create_derived(db, org_id=org_id, scope=scope, relation=relation, **fields)
    else:
        scope = scopes.meet(scope, scopes.of(old), owner_id=owner_id)
        new = new_version(db, old, last_validated_at=now, close_validity=True, source_relation=relation,
                          visibility=scope.visibility, groups=list(scope.groups), labels=list(scope.labels), **fields)
    record(db, org_id=org_id, actor_id=None, action="memory.derive", target_type="memory", target_id=new.id,
           details={"key": key, "kind": kind, "previous": str(old.id) if old else None,
                    "job_id": str(job_id) if job_id else None})
    return ("updated" if old else "created"), new


def declassify(db: Session, principal: Principal, memory_id: uuid.UUID, body: DeclassifyIn) -> Memory:
    """Widen (or change) a memory's scope explicitly: a new version, `declassified_from` lineage
    to the old one, and an audit event with the reason. Stewards and admins only (casbin)."""
    old = repo.get_visible(db, principal, memory_id, for_update=True)
    if old is None:
        raise NotFound("memory not found")
    if (status := status_in(view_of(db), old)) != "active":
        raise Conflict(f"memory is {status}; declassify its current version", code="not_current_version")
    assert_may_share(principal, body.visibility, body.groups)
    new = new_version(db, old, now=datetime.now(timezone.utc), relation="declassified_from", close_validity=False,
                      provenance={**old.provenance, "previous_version": str(old.id),
                                  "declassified": {"by": str(principal.user_id), "reason": body.reason,
                                                   "from": {"visibility": old.visibility, "groups": old.groups,
                                                            "labels": old.labels}}},
                      valid_from=old.valid_from, last_validated_at=old.last_validated_at, writer=principal,
                      visibility=body.visibility, groups=body.groups, labels=body.labels)
    record(db, org_id=old.org_id, actor_id=principal.user_id, action="memory.declassify", target_type="memory",
           target_id=new.id, details={"previous": str(old.id), "reason": body.reason,
                                      "from": {"visibility": old.visibility, "groups": old.groups, "labels": old.labels},
                                      "to": {"visibility": new.visibility, "groups": new.groups, "labels": new.labels}})
    return new


# --- what pipelines and deletion do to memories (whole-org work: the job binds `all_scopes`) ---

def live_memories(db: Session, org_id: uuid.UUID, *, kind: str | None = None) -> list[Memory]:
    return repo.live_memories(db, org_id, kind=kind)


def nearest_in_scope(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID, scope: scopes.Scope, vec,  # noqa: ANN001
                     text: str) -> tuple[Memory, float] | None:
    return repo.nearest_active(db, org_id, owner_id=owner_id, visibility=scope.visibility, groups=list(scope.groups),
                               labels=list(scope.labels), vec=vec, text=text)


def confirm(db: Session, m: Memory, *, sources, relation: str = "distilled_from",  # noqa: ANN001
            job_id: uuid.UUID | None = None) -> None:
    """New sources say what `m` already says: validated now, with lineage to them (no new version)."""
    _validated(db, m, datetime.now(timezone.utc))
    _link(db, m, sources, relation, job_id)


def _validated(db: Session, m: Memory, now: datetime) -> None:
    if not is_below(db, m):  # a branch's confirmation of a base row lives in its lineage edges
        m.last_validated_at = now


def resolve(db: Session, *, org_id: uuid.UUID, winner_id: uuid.UUID, loser_id: uuid.UUID, relation: str,
            job_id: uuid.UUID | None, now: datetime) -> bool:
    """Consolidation: `loser` is superseded by `winner` (`merged_from`: it said the same;
    `supersedes`: it contradicted it, so it also stops being valid). False when the loser is no
    longer active (a concurrent run got there first)."""
    loser = repo.active_if_still(db, org_id, loser_id)
    if loser is None:
        return False
    supersede(db, loser, now, close_validity=relation == "supersedes")
    add_edge(db, org_id=org_id, from_type="memory", from_id=winner_id, to_type="memory", to_id=loser_id,
             relation=relation, job_id=job_id)
    record(db, org_id=org_id, actor_id=None, action=f"memory.{'merge' if relation == 'merged_from' else 'supersede'}",
           target_type="memory", target_id=loser_id, details={"winner": str(winner_id), "job_id": str(job_id)})
    return True


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
    _delete_root(db, m.org_id, m.root_id)
    record(db, org_id=m.org_id, actor_id=None, action="memory.prune", target_type="memory", target_id=m.id,
           details={"reason": reason, "job_id": str(job_id)})


def expire(db: Session, m: Memory, now: datetime, *, reason: str, job_id: uuid.UUID | None) -> None:
    supersede(db, m, now, close_validity=True)
    record(db, org_id=m.org_id, actor_id=None, action="memory.expire", target_type="memory", target_id=m.id,
           details={"reason": reason, "job_id": str(job_id)})


def quarantine(db: Session, m: Memory, *, reason: str, job_id: uuid.UUID | None) -> None:
    """Hide a memory from every read path (e.g. a schema hint whose table changed) until restored.
    In a branch, a base row is masked instead (hidden in the branch for good)."""
    if is_below(db, m):
        add_mask(db, org_id=m.org_id, branch_id=view_of(db).branch_id, item_type="memories", key=m.root_id,
                 at=datetime.now(timezone.utc))
    else:
        m.status = "quarantined"
    record(db, org_id=m.org_id, actor_id=None, action="memory.quarantine", target_type="memory", target_id=m.id,
           details={"reason": reason, "job_id": str(job_id)})


def restore(m: Memory) -> None:
    m.status = "active"


def roots_derived_from(db: Session, org_id: uuid.UUID, source_type: str, source_ids: list[uuid.UUID]) -> list[uuid.UUID]:
    return repo.roots_derived_from(db, org_id, source_type, source_ids)


def remove_or_quarantine(db: Session, org_id: uuid.UUID, roots: list[uuid.UUID], *,
                         removed_source: uuid.UUID) -> cascade.Reached:
    """After a source is gone: `roots` (derived from it) and what was derived from them, transitively,
    whoever may see them. A root with no source left is removed (every version), one with sources
    left quarantined until re-derived (app/memories/cascade.py)."""
    return cascade.follow(db, org_id, roots, removed_source=removed_source)


def forget_sources(db: Session, org_id: uuid.UUID, gone: list[tuple[str, list[uuid.UUID]]], *,
                   removed_source: uuid.UUID) -> cascade.Reached:
    """The cascade after source rows of any type (`gone`: (type, ids)) were deleted."""
    return cascade.from_sources(db, org_id, gone, removed_source=removed_source)


def delete_owned_by(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID) -> cascade.Reached:
    """Right to be forgotten: every memory version the user owns, and the cascade from them."""
    return cascade.delete_owned_by(db, org_id, owner_id)
