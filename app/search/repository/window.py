"""The rows of the time a query names (app.search.service, step 6 of its docstring): the caller's
servable rows of one type whose time (`time_col`: an episode's occurred_at) falls in [since,
until), nearest to the query first. Exact order (`+ 0` keeps HNSW out: the time bound is the
selective part); the same filters as every search statement. A month or day named without a
year ("in June") is the latest such period that holds any of the caller's rows, up to
YEARS_BACK years before the one it was read in (the current year, or the last if still to come)."""

from __future__ import annotations

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.registry import ITEM_TYPES
from app.search.dates import add_months, day_start
from app.search.repository.filters import STATEMENTS, limit_param, pool_columns, qvec_param, servable, shape, with_speakers
from app.search.schemas import SearchFilters
from app.search.time_window import TimeWindow

YEARS_BACK = 3


def named_time_rows(
    db: Session, principal: Principal, type_: str, f: SearchFilters, window: TimeWindow, *, qvec, n: int
) -> list[tuple]:
    """`window_rows` of the named time as read; for a yearless one with none, of the latest earlier
    year that has any."""
    found = window_rows(db, principal, type_, f, qvec=qvec, since=window.since, until=window.until, n=n)
    for back in range(1, YEARS_BACK + 1 if window.yearless and not found else 1):
        since, until = (None if t is None else day_start(add_months(t.date(), -12 * back)) for t in window[:2])
        found = window_rows(db, principal, type_, f, qvec=qvec, since=since, until=until, n=n)
        if found:
            break
    return found


def window_rows(db: Session, principal: Principal, type_: str, f: SearchFilters, *, qvec, since, until, n: int) -> list[tuple]:
    """(id, cosine distance, session_id, n_lex, who: as `repository.pool_rows`) of at most n such rows;
    either end of the window may be open (None)."""
    spec = ITEM_TYPES[type_]
    m, col = spec.model, getattr(spec.model, spec.time_col)

    def build(lo: bool, hi: bool):
        conds = servable(principal, type_, f)
        if lo:
            conds.append(col >= bindparam("since", type_=col.type))
        if hi:
            conds.append(col < bindparam("until", type_=col.type))
        dist = m.embedding.cosine_distance(qvec_param(m))
        kept = select(*pool_columns(m, type_, content=True)).where(*conds).order_by(dist + 0, m.id).limit(limit_param("n"))
        return with_speakers(kept.subquery("kept"), type_)

    lo, hi = since is not None, until is not None
    values = {"qvec": qvec, "n": n, **({"since": since} if lo else {}), **({"until": until} if hi else {})}
    return STATEMENTS.run(db, ("window_rows", lo, hi) + shape(principal, type_, f), lambda: build(lo, hi), values).all()
