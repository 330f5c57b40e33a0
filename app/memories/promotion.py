"""What promoting a branch does to main's memories (app/branches/service.py): the same
versioning path as every other write (`app.memories.service`)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.kit import scope as scopes
from app.lineage.service import add_edge
from app.memories import repository as repo
from app.memories.models import Memory
from app.memories.service import _may_modify, _remove, create_derived, new_version


def promote_version(db: Session, principal: Principal, row: Memory, *, branch: str, now: datetime) -> Memory:
    """A branch's memory version applied to main (the transaction is bound to main): version n+1
    of main's current version of its root, else a new memory; `promoted_from` lineage to it."""
    old = repo.current_of_root(db, principal, row.root_id)
    provenance = {**row.provenance, "promoted_from": {"branch": branch, "id": str(row.id)}}
    fields = dict(owner_id=row.owner_id, text=row.text, kind=row.kind, confidence=row.confidence,
                  embedding=row.embedding, provenance=provenance, valid_from=row.valid_from, agent_id=row.agent_id)
    if old is not None:
        _may_modify(principal, old)
        new = new_version(db, old, now=now, last_validated_at=now, close_validity=True, visibility=row.visibility,
                          groups=list(row.groups), labels=list(row.labels), **fields)
        add_edge(db, org_id=row.org_id, from_type="memory", from_id=new.id, to_type="memory", to_id=row.id,
                 relation="promoted_from")
    else:
        new = create_derived(db, org_id=row.org_id, scope=scopes.of(row), now=now, sources=[("memory", row.id)],
                             relation="promoted_from", **fields)
    record(db, org_id=row.org_id, actor_id=principal.user_id, action="memory.promote", target_type="memory",
           target_id=new.id, details={"branch": branch, "from": str(row.id), "previous": str(old.id) if old else None})
    return new


def delete_root_of(db: Session, principal: Principal, root_id: uuid.UUID) -> None:
    """DELETE of the memory whose root is `root_id`, as the principal sees it (404 if it cannot)."""
    _remove(db, principal, repo.current_of_root(db, principal, root_id,
                                                statuses=("active", "quarantined", "superseded")))
