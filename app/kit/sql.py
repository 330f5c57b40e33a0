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


def among_bound(column, name: str):  # noqa: ANN001, ANN201
    """`column = ANY(:name)`: `among` with the array bound when the statement runs (a statement
    kept in a `StatementCache` takes new ids each time)."""
    return column == any_(bindparam(name, type_=ARRAY(column.type)))


class StatementCache:
    """SQL constructs built once per key and reused, their varying values bound at execution.

    Building a search statement (the access filter, the CTEs) and computing SQLAlchemy's cache
    key for a fresh construct cost more Python than PostgreSQL spends running it: at LoCoMo scale
    ~40% of a hybrid ranking's time in-process (docs/decisions.md, twelfth stop). A key names
    everything the construct bakes in, so it must hold the whole principal (its org, user,
    groups, clearances and view) whenever the construct holds an access filter: a statement
    built for one caller is never run for another. Bounded (least recently used out)."""

    def __init__(self, size: int = 4096):
        import threading
        from collections import OrderedDict

        self._items: OrderedDict = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: tuple, build):  # noqa: ANN001, ANN201
        with self._lock:
            stmt = self._items.get(key)
            if stmt is not None:
                self._items.move_to_end(key)
                return stmt
        stmt = build()
        with self._lock:
            self._items[key] = stmt
            if len(self._items) > self._size:
                self._items.popitem(last=False)
        return stmt

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
