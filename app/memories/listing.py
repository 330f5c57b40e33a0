"""Listing memories: keyset pages of the versions the caller may see, and the versions of one
memory's root, for the console and any client that browses rather than searches. A list hands out
content, so it is recorded as a retrieval like every other read path (app.lineage.service.record_retrieval)."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.errors import NotFound
from app.kit.http.listing import ItemFilters, next_cursor
from app.memories import repository as repo
from app.memories.schemas import MemoryPage
from app.memories.service import to_out


def page(db: Session, principal: Principal, f: ItemFilters, status: str, read=None) -> MemoryPage:
    """Versions that had `status` in the caller's view (main, a branch, as of), in id order after `f.after`."""
    from app.kit.database.replicas import on
    from app.lineage.service import record_listing

    rows = (read or on(db))(lambda rdb: repo.page_visible(rdb, principal, f, (status,)))
    if rows:
        record_listing(db, principal, "memory", rows)
    return MemoryPage(items=[to_out(m, principal.view) for m in rows], next_cursor=next_cursor(rows, f.limit))


def versions(db: Session, principal: Principal, memory_id: uuid.UUID, limit: int, read=None) -> MemoryPage:
    """The versions of `memory_id`'s root that the caller may see in its view, newest first (404 when
    the caller may not see `memory_id` itself)."""
    from app.kit.database.replicas import on
    from app.lineage.service import record_listing

    def fetch(rdb: Session) -> list:
        m = repo.get_visible(rdb, principal, memory_id)
        if m is None:
            raise NotFound("memory not found")
        return repo.versions_visible(rdb, principal, m.root_id, limit)

    rows = (read or on(db))(fetch)
    record_listing(db, principal, "memory", rows, versions_of=str(memory_id))
    return MemoryPage(items=[to_out(m, principal.view) for m in rows], next_cursor=None)
