"""Narrowing reaches a memory's history (docs/security.md "Narrowing propagates").

Every version row is checked against its own scope on every read path (`visible_to`, row-level
security, as-of reads, status filters, lineage, branches). So when a version is written with a
scope narrower than earlier rows of its root, those rows are narrowed too, at write time, in the
same transaction: each OTHER row of the root keeps the meet of its own scope and the new one
(`app.kit.tenancy.scope.meet`). Written in main, that is every row of the root, in main and in every
branch; written in a branch, that branch's own rows only (a branch write never changes main; a
promotion into main then narrows main's, since it is a write in main). Widening later (`declassify`) widens only the
new version. The update reaches rows the writer cannot see (a steward narrowing, a label the
writer lacks, a branch outside its view) the way erasure does: under `every_scope`, reading ids
and scopes only.
"""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from app.audit.service import record
from app.kit.database.db import every_scope
from app.kit.tenancy import scope as scopes
from app.memories import repository as repo
from app.memories.models import Memory


def _same(a: scopes.Scope, b: scopes.Scope) -> bool:
    return (a.visibility, set(a.groups), set(a.labels)) == (b.visibility, set(b.groups), set(b.labels))


def narrow_history(db: Session, new: Memory, *, actor_id: uuid.UUID | None) -> int:
    """Give every other version of `new`'s root that it reaches (see above) the meet of its scope and `new`'s;
    audited as `memory.narrow` when any row changed. Returns how many rows were narrowed."""
    since = scopes.of(new)
    narrowed: list[str] = []
    with every_scope(db):
        for r in repo.scopes_of_root(db, new.org_id, new.root_id, branch_id=new.branch_id):
            if r.id == new.id:
                continue
            kept = scopes.meet(scopes.of(r), since, owner_id=r.owner_id)
            if not _same(kept, scopes.of(r)):
                repo.set_scope(
                    db, new.org_id, r.id, visibility=kept.visibility, groups=list(kept.groups), labels=list(kept.labels)
                )
                narrowed.append(str(r.id))
    if narrowed:
        record(
            db,
            org_id=new.org_id,
            actor_id=actor_id,
            action="memory.narrow",
            target_type="memory",
            target_id=new.id,
            details={
                "rows_narrowed": len(narrowed),
                "versions": narrowed,
                "to": {"visibility": new.visibility, "groups": list(new.groups), "labels": list(new.labels)},
            },
        )
    return len(narrowed)
