"""Listing memories: keyset pages of the versions the caller may see, for the console and any
client that browses rather than searches. A page hands out content, so it is recorded as a
retrieval like every other read path (app.lineage.service.record_retrieval)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.http.listing import ItemFilters, next_cursor
from app.memories import repository as repo
from app.memories.schemas import MemoryPage
from app.memories.service import to_out


def page(db: Session, principal: Principal, f: ItemFilters, status: str, read=None) -> MemoryPage:  # noqa: ANN001
    """Versions that had `status` in the caller's view (main, a branch, as of), in id order after `f.after`."""
    from app.kit.database.replicas import on
    from app.lineage.service import record_retrieval

    rows = (read or on(db))(lambda rdb: repo.page_visible(rdb, principal, f, (status,)))
    if rows:
        record_retrieval(db, principal, kind="list", query="", params={"type": "memory"},
                         items=[{"type": "memory", "id": str(m.id)} for m in rows])
    return MemoryPage(items=[to_out(m, principal.view) for m in rows], next_cursor=next_cursor(rows, f.limit))
