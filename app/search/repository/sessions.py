"""Side sessions for a ranking's per-type stages: another pooled connection bound exactly as the
ranking's own session is (its transaction's row-level-security settings, copied), so that a
stage run there sees what it would have seen in the ranking's session."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

SETTINGS = ("org_id", "user_id", "groups", "clearances", "scope", "branch", "branches")


def binding(db: Session) -> dict | None:
    """The RLS settings `db`'s transaction runs under, or None when a side session could not see
    the same rows: it has written (or holds unflushed changes), or it is not on a pooled engine."""
    if db.new or db.dirty or db.deleted or not isinstance(db.get_bind(), Engine):
        return None
    cols = ", ".join(f"current_setting('memscale.{s}', true) AS {s}" for s in SETTINGS)
    row = db.execute(text(f"SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS wrote, {cols}")).one()
    if row.wrote:
        return None
    return {s: getattr(row, s) or "" for s in SETTINGS}


@contextmanager
def bound_like(engine: Engine, settings: dict, info: dict) -> Iterator[Session]:
    """A session on `engine` whose transaction carries `settings` (from `binding`); rolled back."""
    s = Session(bind=engine, info=dict(info))
    try:
        s.execute(text("SELECT " + ", ".join(f"set_config('memscale.{k}', :{k}, true)" for k in SETTINGS)), settings)
        yield s
    finally:
        s.rollback()
        s.close()
