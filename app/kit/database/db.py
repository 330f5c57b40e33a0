"""Engines and sessions. The request (or job) owns the transaction; services only flush().

Every transaction first states who is asking (`bind_principal`): the org, user, groups and
clearances go into transaction-local settings that the row-level-security policies read.
A session that never sets them sees no tenant rows at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import psycopg
from psycopg.adapt import Loader
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

if TYPE_CHECKING:
    from app.auth.principal import Principal
    from app.kit.tenancy.view import View


def make_engine(url: str, *, pool_size: int = 10) -> Engine:
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        pool_timeout=10,
        # psycopg auto-prepares after 5 runs and a generic plan can walk HNSW before filtering
        # (NOTES.md): never prepare, and always plan with the actual parameters.
        connect_args={"prepare_threshold": None, "options": "-c plan_cache_mode=force_custom_plan"},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _):
        with dbapi_conn.cursor() as cur:
            cur.execute("SET application_name = 'memscale'")
        dbapi_conn.commit()
        tolerate_out_of_range_instants(dbapi_conn)

    return engine


# ---- instants Python cannot hold -------------------------------------------------------------------
# PostgreSQL's timestamptz spans 4713 BC .. 294276 AD (and +-infinity); Python's datetime only
# years 1 .. 9999, and psycopg's loader raises DataError on the rest. Writes through the API are
# bounded (app.kit.http.schemas.Instant), but a row written before that rule, or with SQL, must not make
# every read of its org fail, nor stop its owner or an admin from deleting it: the service's
# connections read such a value as the nearest instant Python holds, datetime.min or datetime.max
# in UTC (docs/security.md, "Instants"). Only the value read is clamped; the row is not changed.
FLOOR = datetime.min.replace(tzinfo=UTC)
CEILING = datetime.max.replace(tzinfo=UTC)


_BEYOND_YEAR_9999 = re.compile(rb"^\d{5,}-")


def _clamped(data, *, binary: bool, aware: bool) -> datetime | None:
    """FLOOR or CEILING for a value outside Python's years (naive for `timestamp`); None for a
    value that failed for another reason (re-raised: never a silent wrong instant)."""
    raw = bytes(data) if binary else bytes(data).strip()
    if binary:  # int64 microseconds since 2000-01-01: it fails only out of range (+-infinity included)
        before = int.from_bytes(raw[:8], "big", signed=True) < 0
    elif raw.endswith(b"BC") or raw == b"-infinity":  # ISO output: "0001-12-31 22:00:00+00 BC"
        before = True
    elif raw == b"infinity" or _BEYOND_YEAR_9999.match(raw):  # "10000-01-01 00:00:00+00"
        before = False
    else:
        return None
    out = FLOOR if before else CEILING
    return out if aware else out.replace(tzinfo=None)


def _tolerant(base: type, *, binary: bool, aware: bool) -> type:
    class Tolerant(Loader):
        format = base.format

        def __init__(self, oid: int, context=None) -> None:
            super().__init__(oid, context)
            self._inner = base(oid, context)

        def load(self, data):
            try:
                return self._inner.load(data)
            except psycopg.DataError:
                out = _clamped(data, binary=binary, aware=aware)
                if out is None:
                    raise
                return out

    Tolerant.__name__ = f"Tolerant{base.__name__}"
    return Tolerant


def tolerate_out_of_range_instants(conn) -> None:
    """Register the clamping loaders for timestamptz and timestamp on `conn`."""
    for name, aware in (("timestamptz", True), ("timestamp", False)):
        oid = psycopg.postgres.types[name].oid
        for fmt, binary in ((psycopg.pq.Format.TEXT, False), (psycopg.pq.Format.BINARY, True)):
            base = conn.adapters.get_loader(oid, fmt)
            if base is not None and not getattr(base, "_memscale_tolerant", False):
                loader = _tolerant(base, binary=binary, aware=aware)
                loader._memscale_tolerant = True
                conn.adapters.register_loader(oid, loader)


def make_sessionmaker(engine: Engine, *, audit_key: bytes | None = None) -> sessionmaker[Session]:
    """`audit_key` seals the audit events written through these sessions (app/audit/service.py)."""
    return sessionmaker(engine, expire_on_commit=False, autoflush=False, info={"audit_key": audit_key})


def bind_principal(
    db: Session, principal: Principal | None, *, org_id=None, all_scopes: bool = False, view: View | None = None
) -> None:
    """Set the RLS context for the current transaction (transaction-local): who asks, and which
    state of the org's memory it reads and writes (`view`, else the principal's, else main; kept
    in `db.info["view"]` for the org-level reads of pipelines, app/kit/tenancy/view.py)."""
    from app.kit.tenancy.view import MAIN

    org = str(principal.org_id if principal else org_id)
    view = view or (principal.view if principal else None) or MAIN
    db.info["view"] = view
    db.execute(
        text(
            "SELECT set_config('memscale.org_id', :org, true), set_config('memscale.user_id', :user, true),"
            " set_config('memscale.groups', :groups, true), set_config('memscale.clearances', :cl, true),"
            " set_config('memscale.scope', :scope, true), set_config('memscale.branch', :branch, true),"
            " set_config('memscale.branches', :branches, true)"
        ),
        {
            "org": org,
            "user": str(principal.user_id) if principal else "",
            "groups": json.dumps(list(principal.groups) if principal else []),
            "cl": json.dumps(list(principal.clearances) if principal else []),
            "scope": "all" if all_scopes else "user",
            "branch": "*" if view.every_branch else str(view.branch_id or ""),
            "branches": json.dumps([str(b) for b in view.branch_ids()]),
        },
    )


def view_of(db: Session) -> View:
    """The view bound to this session's transactions (main when none was bound)."""
    from app.kit.tenancy.view import MAIN

    return db.info.get("view") or MAIN


def is_below(db: Session, row) -> bool:
    """Whether `row` (a memory, an asset: anything with `branch_id`) lies below the transaction's
    branch (main's, read in a branch): the branch may not change it (row-level security
    refuses), only mask it."""
    branch = view_of(db).branch_id
    return branch is not None and row.branch_id != branch


@contextmanager
def transaction(factory: sessionmaker[Session], *, lsn: list | None = None) -> Iterator[Session]:
    """Commit on success, roll back on any error. `lsn`: if the transaction wrote, the primary's WAL
    position after the commit is appended (read-your-writes on replicas, app/kit/database/replicas.py)."""
    db = factory()
    try:
        yield db
        wrote = lsn is not None and xact_wrote(db)
        db.commit()
        if wrote:
            try:
                lsn.append(wal_lsn(db))
            except Exception:
                db.rollback()
    except BaseException:
        db.rollback()
        raise
    finally:
        db.close()


@contextmanager
def released(db: Session, principal: Principal) -> Iterator[None]:
    """Give the pooled connection back while the request does slow work that needs no database
    (embedding a query or a batch): under load, requests waiting for the CPU otherwise sit on
    every connection in the pool. Only for a transaction that has not written and holds no lock
    it still needs (transaction-scoped advisory locks end here too): it ends, and the next
    statement opens a new one with the caller's RLS settings bound again."""
    if db.new or db.dirty or db.deleted:
        raise RuntimeError("released() inside a transaction with pending writes")
    db.commit()
    yield
    bind_principal(db, principal)


@contextmanager
def every_scope(db: Session) -> Iterator[None]:
    """Let the RLS backstop see every scope of the bound org inside the block, then restore the
    scope that was bound before (a caller already widened stays widened). For system work that
    must reach rows the caller cannot see: a deletion cascade, an existence check. Every branch's
    rows too (a deletion reaches every branch, app/kit/tenancy/view.py). The code in the block decides
    what it reads; it must never hand content it reached this way to the caller."""
    prev, branch = db.execute(
        text(
            "SELECT coalesce(current_setting('memscale.scope', true), 'user'),"
            " coalesce(current_setting('memscale.branch', true), '')"
        )
    ).one()
    db.execute(text("SELECT set_config('memscale.scope', 'all', true), set_config('memscale.branch', '*', true)"))
    try:
        yield
    finally:
        db.execute(
            text("SELECT set_config('memscale.scope', :s, true), set_config('memscale.branch', :b, true)"),
            {"s": prev or "user", "b": branch},
        )


# Existence checks over ids only (lineage placeholders): the same widening, named for its use.
existence_only = every_scope


# ---- replication positions (app/kit/database/replicas.py) ---------------------------------------------------
def xact_wrote(db: Session) -> bool:
    """Whether the open transaction has written anything (it holds a transaction id only then)."""
    return db.execute(text("SELECT pg_current_xact_id_if_assigned() IS NOT NULL")).scalar_one()


def wal_lsn(db) -> str:
    """The primary's current WAL write position: at or past every commit that has returned."""
    return db.execute(text("SELECT pg_current_wal_lsn()::text")).scalar_one()


def standby_status(conn) -> tuple[bool, str | None]:
    """(in recovery, last replayed WAL position) of a server: a streaming replica is in recovery."""
    row = conn.execute(text("SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text")).one()
    return bool(row[0]), row[1]


def replayed_past(db: Session, lsn: str) -> bool:
    """Whether this standby has replayed the WAL up to `lsn` (a write's Memscale-LSN)."""
    return bool(
        db.execute(text("SELECT coalesce(pg_last_wal_replay_lsn() >= CAST(:l AS pg_lsn), false)"), {"l": lsn}).scalar_one()
    )


# ---- shared rate limits (app/kit/http/limits.py PgRateLimiter) -----------------------------------------
_BUCKET_LEVEL = "least(:cap, b.tokens + extract(epoch FROM clock_timestamp() - b.at) * :rate)"


def take_tokens(conn, key: str, cost: float, need: float, cap: float, rate: float) -> float | None:
    """Take `cost` units from the bucket `key` if it holds at least `need`: one statement, atomic
    across processes (the row lock of the upsert). Returns None when taken, else the bucket's level."""
    p = {"k": key, "cost": cost, "need": need, "cap": cap, "rate": rate}
    taken = conn.execute(
        text(
            "INSERT INTO rate_buckets AS b (key, tokens, at) VALUES (:k, :cap - :cost, clock_timestamp())"
            f" ON CONFLICT (key) DO UPDATE SET tokens = {_BUCKET_LEVEL} - :cost, at = clock_timestamp()"
            f" WHERE {_BUCKET_LEVEL} >= :need RETURNING tokens"
        ),
        p,
    ).first()
    return None if taken is not None else bucket_level(conn, key, cap, rate)


def bucket_level(conn, key: str, cap: float, rate: float) -> float:
    level = conn.execute(
        text(f"SELECT {_BUCKET_LEVEL} FROM rate_buckets b WHERE key = :k"), {"k": key, "cap": cap, "rate": rate}
    ).scalar()
    return cap if level is None else float(level)


def forget_full_buckets(conn, older_than_s: float) -> None:
    """Buckets idle long enough to be full again carry no information."""
    conn.execute(text("DELETE FROM rate_buckets WHERE at < clock_timestamp() - make_interval(secs => :s)"), {"s": older_than_s})
