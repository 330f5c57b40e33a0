"""SQL building blocks the repositories share."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import any_, bindparam
from sqlalchemy.dialects.postgresql import ARRAY


def among(column, values: Iterable):  # noqa: ANN001, ANN201
    """`column = ANY(:values)`, the values bound as ONE array parameter.

    `column.in_(values)` renders one placeholder per value, so the statement's text changes with
    the list's length: SQLAlchemy's compiled cache and psycopg's query cache both miss, and psycopg
    re-parses the whole text on every call (a search's 130-row neighbour lookup spent ~5 ms of
    Python in psycopg's `_split_query` alone, more than the server took to plan and run it).
    """
    return column == any_(bindparam(None, list(values), type_=ARRAY(column.type)))
