"""What deleting a memory's source does to the memories derived from it (DESIGN.md §4), whoever
deletes it and wherever the derived memories lie. One cascade for every source type and every
deletion path: DELETE of a memory or an episode, the right to be forgotten, retention,
consolidation's prune, knowledge assets and chunks, and the same deletes written in a branch.

A memory's content sources are its `distilled_from` / `summarised_from` lineage edges, to
episodes, memory versions, knowledge chunks or assets. Once sources are gone, every memory root
derived from them, directly or through other memories (M0 → M1 → M2), is reached, every version:

- a root with no source left is removed, content included. A source that is a memory counts as
  gone when the same cascade removes it, so a chain whose only origin was deleted goes whole;
- a root with a source left is quarantined (hidden from every read path, `pending_rederive`)
  until it is re-derived without the removed one, exactly as for episodes. What was derived from
  a quarantined memory is quarantined with it: it may repeat what the removed source said.

In a branch every root reached is removed from the branch (its own versions deleted, the rest
masked): a branch cannot quarantine what lies below it.

The cascade widens the row-level-security scope to the whole org and every branch
(`every_scope`): a member deleting an org memory cannot see the private memory a colleague
derived from it, nor a copy in a branch, and both must go. It hands back ids and scopes only, so
that the caller reports counts of what it may see (`Reached.seen_by`); the audit log records ids.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.database.db import every_scope, view_of
from app.kit.items import MEMORY
from app.kit.tenancy.access import can_see
from app.kit.tenancy.repository_view import add_mask
from app.memories import repository as repo


@dataclass
class Reached:
    """The memory versions a cascade removed or quarantined, with each one's scope (for counting
    what a caller may be told, never for showing)."""

    removed: list[uuid.UUID] = field(default_factory=list)
    quarantined: list[uuid.UUID] = field(default_factory=list)
    scopes: dict[uuid.UUID, tuple] = field(default_factory=dict)  # id -> (org, owner, visibility, groups, labels)

    def __bool__(self) -> bool:
        return bool(self.removed or self.quarantined)

    def add(self, other: Reached) -> Reached:
        self.removed += other.removed
        self.quarantined += other.quarantined
        self.scopes.update(other.scopes)
        return self

    def seen_by(self, principal: Principal | None) -> tuple[int, int]:
        """(removed, quarantined) as `principal` may be told them: every one for a system job (None)
        or for a principal who reads the audit log anyway (admins, auditors); else only the versions
        it may see, so a deletion's answer says nothing of other users' private memories."""
        if principal is None or principal.has_role("admin", "auditor"):
            return len(self.removed), len(self.quarantined)

        def seen(ids: list[uuid.UUID]) -> int:
            return sum(
                1
                for i in ids
                if i in self.scopes
                and can_see(principal, **dict(zip(("org_id", "owner_id", "visibility", "groups", "labels"), self.scopes[i])))
            )

        return seen(self.removed), seen(self.quarantined)

    def audit(self) -> dict:
        """What the audit event records: ids, never content."""
        return {
            "removed_memory_ids": [str(i) for i in self.removed],
            "quarantined_memory_ids": [str(i) for i in self.quarantined],
        }


def _scope(v) -> tuple:
    """A version's scope as `Reached.scopes` keeps it."""
    return v.org_id, v.owner_id, v.visibility, v.groups, v.labels


def delete_versions(db: Session, org_id: uuid.UUID, root_id: uuid.UUID) -> list[uuid.UUID]:
    """Every version of a memory in this transaction's branch (main: main's, and under
    `every_scope` every branch's: erasure reaches them all). In a branch, the versions of the
    layers below are masked, not touched (row-level security would refuse it anyway)."""
    branch = view_of(db).branch_id
    ids = repo.delete_root(db, org_id, root_id, branch=branch)
    if branch is not None:
        add_mask(db, org_id=org_id, branch_id=branch, item_type="memories", key=root_id, at=datetime.now(UTC))
    return ids


def delete_root(db: Session, org_id: uuid.UUID, root_id: uuid.UUID) -> tuple[list[uuid.UUID], Reached]:
    """Delete a memory (`delete_versions`) and follow the cascade from it: (its ids, what it reached).
    In a branch, main's versions it masks are gone for the branch too, so they are followed."""
    shown = repo.version_ids_in_view(db, org_id, root_id)
    ids = delete_versions(db, org_id, root_id)
    return ids, from_sources(db, org_id, [(MEMORY, sorted(set(ids) | set(shown), key=str))], removed_source=root_id)


def from_sources(
    db: Session, org_id: uuid.UUID, gone: list[tuple[str, list[uuid.UUID]]], *, removed_source: uuid.UUID
) -> Reached:
    """Follow the deletion of source rows (`gone`: (type, ids), already deleted or masked)."""
    with every_scope(db):
        roots = {r for type_, ids in gone for r in repo.roots_derived_from(db, org_id, type_, list(ids))}
        return follow(db, org_id, sorted(roots, key=str), removed_source=removed_source)


def follow(db: Session, org_id: uuid.UUID, roots: list[uuid.UUID], *, removed_source: uuid.UUID) -> Reached:
    """Remove or quarantine `roots` (derived from something just deleted) and everything derived
    from them, transitively (see the module)."""
    reached = Reached()
    if not roots:
        return reached
    with every_scope(db):
        versions = _closure(db, org_id, roots)
        dead = _without_sources(db, org_id, versions)
        in_branch = view_of(db).branch_id is not None
        for root in sorted(versions, key=str):
            if in_branch or root in dead:
                ids = delete_versions(db, org_id, root)
                reached.removed += ids
            else:
                ids = repo.quarantine_root(db, org_id, root, removed_source=removed_source)
                reached.quarantined += ids
            scopes = {v.id: _scope(v) for v in versions[root]}
            reached.scopes.update({i: scopes[i] for i in ids if i in scopes})
    return reached


def _closure(db: Session, org_id: uuid.UUID, roots: list[uuid.UUID]) -> dict[uuid.UUID, list]:
    """{root: its versions} for `roots` and every root derived from one of their versions, transitively
    (a root is visited once, so a cycle of derivations ends)."""
    found: dict[uuid.UUID, list] = {}
    frontier = list(roots)
    while frontier:
        for root in frontier:
            found[root] = []
        rows = repo.versions_of_roots(db, org_id, frontier)
        for v in rows:
            found[v.root_id].append(v)
        frontier = [r for r in repo.roots_derived_from(db, org_id, MEMORY, [v.id for v in rows]) if r not in found]
    return found


def _without_sources(db: Session, org_id: uuid.UUID, versions: dict[uuid.UUID, list]) -> set[uuid.UUID]:
    """The roots of `versions` left with no content source: every source edge of every version
    points at a row that is gone, or at a memory of a root that is itself left with none (the
    least fixed point: a root is removed only once everything it stood on is gone)."""
    edges: dict[uuid.UUID, set] = {}
    for root, type_, id_ in repo.content_sources(db, org_id, list(versions)):
        edges.setdefault(root, set()).add((type_, id_))
    exists = repo.still_existing(db, org_id, {pair for pairs in edges.values() for pair in pairs})
    root_of = {v.id: root for root, rows in versions.items() for v in rows}
    dead: set[uuid.UUID] = set()
    while True:
        newly = {
            root
            for root in versions
            if root not in dead
            and not any((t, i) in exists and not (t == MEMORY and root_of.get(i) in dead) for t, i in edges.get(root, ()))
        }
        if not newly:
            return dead
        dead |= newly


def delete_owned_by(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID) -> Reached:
    """Right to be forgotten: every memory version the user owns (the transaction's scope: the
    erasure binds every scope and branch), then the cascade from them; all in one `Reached`."""
    own = repo.delete_owned_by(db, org_id, owner_id)
    reached = Reached(removed=[v.id for v in own], scopes={v.id: _scope(v) for v in own})
    return reached.add(from_sources(db, org_id, [(MEMORY, [v.id for v in own])], removed_source=owner_id))
