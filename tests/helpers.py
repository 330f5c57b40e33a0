from __future__ import annotations

from sqlalchemy import text


def count(engine, table: str, org_id) -> int:  # noqa: ANN001
    with engine.connect() as c:
        return c.execute(text(f"SELECT count(*) FROM {table} WHERE org_id = :o"), {"o": org_id}).scalar()


def ep(content: str = "the deploy failed because the cache was cold", **kw) -> dict:
    return {"kind": "note", "content": content, **kw}
