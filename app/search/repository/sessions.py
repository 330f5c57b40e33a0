"""Side sessions for a ranking's per-type stages: another pooled connection bound exactly as the
ranking's own session is (its transaction's row-level-security settings, copied), so that a
stage run there sees what it would have seen in the ranking's session.

At most SIDE_CONNECTIONS side sessions are open in this process at any time (`SIDE`, shared by
every user of them): a job finding none free runs in the ranking's own session, so that a flood
of searches cannot take the pool from the writes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

T = TypeVar("T")
SIDE_CONNECTIONS = 6
SIDE = threading.BoundedSemaphore(SIDE_CONNECTIONS)
SIDE_POOL = ThreadPoolExecutor(max_workers=SIDE_CONNECTIONS, thread_name_prefix="search-side")
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


def at_once(db: Session, jobs: list[Callable[[Session], T]]) -> list[T]:
    """Each job's answer, in order: the first run in `db`, the others at once on side sessions
    bound like `db` while side connections are free (else in `db` after the first). All of them
    in `db` when its transaction has written (`binding`). Every side job is awaited, and its
    connection given back, before this returns or raises."""
    settings = binding(db) if len(jobs) > 1 else None
    aside: list[int] = []
    for i in range(1, len(jobs)) if settings is not None else ():
        if not SIDE.acquire(blocking=False):
            break
        aside.append(i)
    futures = {i: SIDE_POOL.submit(_aside, db.get_bind(), settings, db.info, jobs[i]) for i in aside}
    out: list = [None] * len(jobs)
    try:
        for i, job in enumerate(jobs):
            if i not in futures:
                out[i] = job(db)
    finally:
        for i, fut in futures.items():
            try:
                out[i] = fut.result()
            except BaseException as e:  # raised below, once every side job is done
                out[i] = e
    for value in out:
        if isinstance(value, BaseException):
            raise value
    return out


def _aside(engine: Engine, settings: dict, info: dict, job: Callable[[Session], T]) -> T:
    try:
        with bound_like(engine, settings, info) as side:
            return job(side)
    finally:
        SIDE.release()
