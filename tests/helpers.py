from __future__ import annotations

from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


def count(engine, table: str, org_id) -> int:
    with engine.connect() as c:
        return c.execute(text(f"SELECT count(*) FROM {table} WHERE org_id = :o"), {"o": org_id}).scalar()


def ep(content: str = "the deploy failed because the cache was cold", **kw) -> dict:
    return {"kind": "note", "content": content, **kw}


@contextmanager
def scratch_database(settings, name: str):
    """(settings, engine) for a new empty database `name` on the test server, dropped afterwards
    (and first, should an interrupted run have left it): for migration tests."""
    url = make_url(settings.database_url)
    server = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with server.connect() as c:
        c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        c.execute(text(f"CREATE DATABASE {name}"))
    s = settings.model_copy(update={"database_url": url.set(database=name).render_as_string(False)})
    eng = create_engine(s.database_url)
    try:
        yield s, eng
    finally:
        eng.dispose()
        with server.connect() as c:
            c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        server.dispose()
