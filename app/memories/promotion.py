"""What promoting a branch does to main's memories (app/branches/service.py): the same
versioning path as every other write (`app.memories.versioning`), checked against everything main
holds of the memory: never a second root, never wider than main, never a revival."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.kit.database.db import every_scope
from app.kit.errors import Conflict, NotFound
from app.kit.tenancy import scope as scopes
from app.kit.tenancy.access import assert_may_shape_profile, can_see
from app.lineage.service import add_edge
from app.memories import repository as repo
from app.memories.models import AGENT_KINDS, Memory
from app.memories.service import check_may_modify, remove
from app.memories.versioning import create_derived, new_version


class DeletedInMain(Conflict):
    code = "deleted_in_main"


def _main_current(db: Session, principal: Principal, root_id: uuid.UUID) -> Memory | None:
    """Main's current version of a root the branch row belongs to, checked against ALL of main's
    versions, not only those the caller may see: None when the root began in a branch and main has
    none yet. A root deleted in main stays deleted (409); one main holds but the caller cannot see
    (its owner made it private) is a 404, as a PATCH of it would be; one no longer active in main
    (quarantined, expired) is a 409: never a second root beside it."""
    with every_scope(db):  # main's versions whoever may see them; nothing read here is handed out
        rows = repo.main_rows_of_root(db, principal.org_id, root_id)
        began_in_branch = not rows and repo.began_in_a_branch(db, principal.org_id, root_id)
    if not rows:
        if began_in_branch:
            return None
        raise DeletedInMain(
            f"memory {root_id} was deleted in main; a deleted memory stays deleted (create a new one in main instead)"
        )
    current = rows[0]
    if not can_see(
        principal,
        org_id=current.org_id,
        owner_id=current.owner_id,
        visibility=current.visibility,
        groups=current.groups,
        labels=current.labels,
    ):
        raise NotFound(f"memory {root_id} not found in main")
    if current.status != "active":
        raise Conflict(f"memory {root_id} is {current.status} in main; promote onto an active memory", code="not_current_version")
    return current


def promote_version(db: Session, principal: Principal, row: Memory, *, branch: str, now: datetime) -> Memory:
    """A branch's memory version applied to main (the transaction is bound to main): version n+1
    of main's current version of its root, else (a memory begun in the branch) a new memory;
    `promoted_from` lineage to it. Never wider than main's current version: the
    promoted scope is the meet of the branch row's and main's (`app.kit.tenancy.scope.meet`), so a branch
    forked before its owner narrowed it cannot re-publish it; widening is `declassify`'s, audited."""
    old = _main_current(db, principal, row.root_id)
    provenance = {**row.provenance, "promoted_from": {"branch": branch, "id": str(row.id)}}
    fields = dict(
        text=row.text,
        kind=row.kind,
        confidence=row.confidence,
        embedding=row.embedding,
        provenance=provenance,
        valid_from=row.valid_from,
        agent_id=row.agent_id,
    )
    if old is not None:
        check_may_modify(principal, old)
        scope = scopes.meet(scopes.of(row), scopes.of(old), owner_id=old.owner_id)
        if old.kind in AGENT_KINDS:
            assert_may_shape_profile(principal, scope.visibility, owner_id=old.owner_id)
        new = new_version(
            db,
            old,
            now=now,
            last_validated_at=now,
            close_validity=True,
            visibility=scope.visibility,
            groups=list(scope.groups),
            labels=list(scope.labels),
            writer=principal,
            **fields,
        )
        add_edge(
            db, org_id=row.org_id, from_type="memory", from_id=new.id, to_type="memory", to_id=row.id, relation="promoted_from"
        )
    else:
        if row.kind in AGENT_KINDS:
            assert_may_shape_profile(principal, row.visibility, owner_id=row.owner_id)
        new = create_derived(
            db,
            org_id=row.org_id,
            owner_id=row.owner_id,
            scope=scopes.of(row),
            now=now,
            sources=[("memory", row.id)],
            relation="promoted_from",
            **fields,
        )
    record(
        db,
        org_id=row.org_id,
        actor_id=principal.user_id,
        action="memory.promote",
        target_type="memory",
        target_id=new.id,
        details={
            "branch": branch,
            "from": str(row.id),
            "previous": str(old.id) if old else None,
            "visibility": new.visibility,
            "groups": list(new.groups),
            "labels": list(new.labels),
        },
    )
    return new


def delete_root_of(db: Session, principal: Principal, root_id: uuid.UUID) -> None:
    """DELETE of the memory whose root is `root_id`, as the principal sees it (404 if it cannot)."""
    remove(db, principal, repo.current_of_root(db, principal, root_id, statuses=("active", "quarantined", "superseded")))
