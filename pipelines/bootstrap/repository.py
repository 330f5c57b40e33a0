"""Queries against a bootstrap *source* (the customer's database being described), not against
memscale's own. Read-only, bounded: a sample and a few statistics per column."""

from __future__ import annotations

from sqlalchemy import MetaData, Table, func, select
from sqlalchemy.engine import Connection

TOP_VALUES = 6  # a column with at most this many distinct values lists them all
SAMPLE_ROWS = 10_000  # statistics are taken over at most this many rows


def column_stats(conn: Connection, table: str, schema: str | None, columns: list[str]) -> dict[str, dict]:
    """{column: {rows, distinct, nulls, values? (all, when few), min?, max?}} over a bounded sample."""
    t = Table(table, MetaData(), schema=schema, autoload_with=conn)
    sample = select(*[t.c[c] for c in columns]).limit(SAMPLE_ROWS).subquery()
    aggs = []
    for c in columns:
        col = sample.c[c]
        aggs += [func.count(func.distinct(col)), func.count() - func.count(col), func.min(col), func.max(col)]
    row = conn.execute(select(func.count(), *aggs).select_from(sample)).one()
    out: dict[str, dict] = {}
    for i, c in enumerate(columns):
        distinct, nulls, lo, hi = row[1 + 4 * i : 5 + 4 * i]
        st = {"rows": row[0], "distinct": distinct, "nulls": nulls, "min": lo, "max": hi}
        if 0 < distinct <= TOP_VALUES:
            st["values"] = [
                v
                for (v,) in conn.execute(
                    select(sample.c[c])
                    .where(sample.c[c].is_not(None))
                    .group_by(sample.c[c])
                    .order_by(func.count().desc(), sample.c[c])
                    .limit(TOP_VALUES)
                )
            ]
        out[c] = st
    return out
