"""SQL building blocks the repositories share."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from sqlalchemy import Text, any_, bindparam, cast
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import TypeDecorator


def among(column, values: Iterable):
    """`column = ANY(:values)`, the values bound as ONE array parameter.

    `column.in_(values)` renders one placeholder per value, so the statement's text changes with
    the list's length: SQLAlchemy's compiled cache and psycopg's query cache both miss, and psycopg
    re-parses the whole text on every call (a search's 130-row neighbour lookup spent ~5 ms of
    Python in psycopg's `_split_query` alone, more than the server took to plan and run it).
    """
    return column == any_(bindparam(None, list(values), type_=ARRAY(column.type)))


class IdList(TypeDecorator):
    """Ids bound as ONE array literal ('{id,id,...}', cast to uuid[] in the statement) instead of
    an array psycopg dumps element by element in Python (~5 us an id: a search binds ~500). An
    element is a UUID or the text of one (as the search statements return them); anything else
    is refused, so no value can add elements to the literal."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value, dialect):
        out = []
        for v in value:
            if not isinstance(v, uuid.UUID) and not (isinstance(v, str) and len(v) == 36 and v.replace("-", "").isalnum()):
                raise ValueError(f"not an id: {v!r}")
            out.append(str(v))
        return "{" + ",".join(out) + "}"


def among_bound(column, name: str):
    """`column = ANY(:name)`: `among` with the ids bound when the statement runs (a statement kept
    in a `StatementCache` takes new ids each time), as one literal (`IdList`)."""
    return column == any_(cast(bindparam(name, type_=IdList()), ARRAY(column.type)))


def as_text(column):
    """An id column returned as its text: the ranking keys its dictionaries by id (~20 lookups a
    pooled row), and a str hashes once and loads without a UUID object per row."""
    return cast(column, Text)


class Compiled:
    """A statement compiled once: its SQL text, the values it bakes in (already processed for the
    driver) and the processors of the values bound when it runs. Running it hands the text and
    the values straight to the driver (`exec_driver_sql`): per execution SQLAlchemy no longer
    walks the construct, looks up its compiled form or processes the ~40 constant values an
    access filter holds (~25% of a LoCoMo ranking's time in-process; docs/decisions/latency.md). Rows come
    back as the driver types them (uuid, text, float, jsonb as Python objects), labelled as in
    the statement."""

    __slots__ = ("sql", "const", "procs", "names")

    def __init__(self, stmt, dialect):
        compiled = stmt.compile(dialect=dialect)
        self.names = {name for name, b in compiled.binds.items() if b.required}
        # The final text and values, with IN lists of constants ("expanding" parameters) rendered
        # out; the names bound at run time get placeholders (None) here.
        state = compiled.construct_expanded_state(dict.fromkeys(self.names))
        procs = {**compiled._bind_processors, **state.processors}
        self.const = {k: (procs[k](v) if k in procs else v) for k, v in state.parameters.items() if k not in self.names}
        self.procs = {k: procs[k] for k in self.names if k in procs}
        self.sql = state.statement

    def run(self, db, values: dict | None = None):
        """The result of running it in `db`'s transaction with `values` for its bound names."""
        values = values or {}
        if set(values) != self.names:
            raise ValueError(f"values for {sorted(self.names)} expected, got {sorted(values)}")
        params = dict(self.const)
        for k, v in values.items():
            params[k] = _processed(db, self.procs[k], v) if k in self.procs else v
        return db.connection().exec_driver_sql(self.sql, params)


def _processed(db, proc, value):
    """`proc(value)`, remembered in the session for the last array value (the query's embedding):
    a ranking binds it in three to four statements, and pgvector renders its 384 floats as text
    each time (~0.5 ms here). Keyed by the value's identity while the session holds the value
    itself (so a later array at the same address is never read as this one) and by the
    processor's code (each compiled statement has its own closure of the type's processor)."""
    if not hasattr(value, "__array__"):
        return proc(value)
    code = getattr(proc, "__code__", proc)
    last = db.info.get("_last_bound")
    if last is not None and last[0] is value and last[1] is code:
        return last[2]
    out = proc(value)
    db.info["_last_bound"] = (value, code, out)
    return out


class StatementCache:
    """SQL statements compiled once per key and reused (`Compiled`), their varying values bound at
    execution.

    Building a search statement (the access filter, the CTEs), SQLAlchemy's cache key for a fresh
    construct and its per-execution processing cost more Python than PostgreSQL spends running
    it: at LoCoMo scale ~40% of a hybrid ranking's time in-process went to building alone
    (docs/decisions/latency.md, "Statements"). A key names everything the statement bakes in, so it must
    hold the whole principal (its org, user, groups, clearances and view) whenever the statement
    holds an access filter: a statement built for one caller is never run for another. Bounded
    (least recently used out)."""

    def __init__(self, size: int = 2048):
        import threading
        from collections import OrderedDict

        self._items: OrderedDict = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, db, key: tuple, build) -> Compiled:
        """The compiled statement for `key` (`build()` makes the construct on a miss)."""
        with self._lock:
            stmt = self._items.get(key)
            if stmt is not None:
                self._items.move_to_end(key)
                return stmt
        stmt = Compiled(build(), db.get_bind().dialect)
        with self._lock:
            self._items[key] = stmt
            if len(self._items) > self._size:
                self._items.popitem(last=False)
        return stmt

    def run(self, db, key: tuple, build, values: dict | None = None):
        return self.get(db, key, build).run(db, values)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
