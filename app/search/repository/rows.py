"""Rows by id (a result's full row) and the turns just before and after a conversation turn."""

from __future__ import annotations

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session, aliased

from app.auth.principal import Principal
from app.episodes.models import Episode
from app.kit.database.sql import among_bound, as_text
from app.kit.registry import ITEM_TYPES
from app.kit.tenancy.access import visible_to
from app.search.repository.filters import STATEMENTS, servable
from app.search.schemas import SearchFilters

# Made once: SQLAlchemy memoises an alias's adapted columns on the alias itself, so a fresh
# `aliased(Episode)` per call would re-adapt every column the statement names on every lookup
# (more Python time than the server spends planning and running it).
_HIT, _NEAR = aliased(Episode, name="hit"), aliased(Episode, name="near")


def neighbour_ids(db: Session, principal: Principal, hit_ids: list) -> list[tuple]:
    """(neighbour id, hit id) for the servable episode just before and the one just after each hit
    in the same session (by occurred_at): the turns around a retrieved conversation turn."""
    if not hit_ids:
        return []
    rows = STATEMENTS.run(db, ("neighbours", principal), lambda: _neighbours_select(principal), {"hits": list(hit_ids)}).all()
    return [(r.prev, r.id) for r in rows if r.prev is not None] + [(r.next, r.id) for r in rows if r.next is not None]


def _neighbours_select(principal: Principal):
    """Per hit one row with both neighbours as scalar subqueries (an index probe each on
    (org, session, occurred_at, id)): one pass over the hits instead of a lateral join per side
    and their union, which costs more to plan than to run."""
    hit, n = _HIT, _NEAR

    def side(before: bool):
        near = (
            tuple_(n.occurred_at, n.id) < tuple_(hit.occurred_at, hit.id)
            if before
            else tuple_(n.occurred_at, n.id) > tuple_(hit.occurred_at, hit.id)
        )
        order = (n.occurred_at.desc(), n.id.desc()) if before else (n.occurred_at, n.id)
        return (
            select(as_text(n.id))
            .where(*servable(principal, "episode", SearchFilters(), n), near, n.session_id == hit.session_id)
            .order_by(*order)
            .limit(1)
            .scalar_subquery()
        )

    return select(as_text(hit.id).label("id"), side(True).label("prev"), side(False).label("next")).where(
        among_bound(hit.id, "hits"), hit.session_id.is_not(None), visible_to(principal, hit)
    )


def load(db: Session, principal: Principal, type_: str, ids: list) -> dict:
    if not ids:
        return {}
    m = ITEM_TYPES[type_].model

    def build():
        cols = [c for c in m.__table__.columns if c.name not in ("embedding", "tsv")]
        return select(*cols).where(among_bound(m.id, "ids"), visible_to(principal, m))

    rows = STATEMENTS.run(db, ("load", principal, type_), build, {"ids": list(ids)}).all()
    return {str(r.id): r for r in rows}
