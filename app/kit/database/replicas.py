"""Read replicas: search, context, GET of one item and lineage read from PostgreSQL streaming
standbys (MEMSCALE_READ_REPLICA_URLS); everything else, and every write, stays on the primary.

Design choices:
- **Explicit, per read.** A read path hands a function of a session to `Reader` (`reads(request,
  db, principal)`); it runs on a standby session with the caller's RLS settings bound exactly as
  on the primary (`bind_principal`: transaction-local `set_config`, which a hot standby allows),
  and the request's own primary transaction keeps everything that writes (retrieval events,
  audit). Nothing routes by guessing at SQL text.
- **Read-your-writes by LSN.** A request whose transaction wrote gets `Memscale-LSN: <lsn>` on its
  response: the primary's WAL position read right after the commit, so at or past the commit
  record. A read that sends it back is served by a standby only once that standby has replayed
  past it: at once when the last probe already saw it there, else after polling
  `pg_last_wal_replay_lsn()` for up to `replica_wait_ms`; otherwise by the primary.
- **No failed request because of a standby.** A background thread probes every standby each
  `replica_check_interval_s` (in recovery? replayed how far behind the primary's position?); one
  further behind than `replica_max_lag_bytes`, or unreachable, is skipped. A database error while
  a read runs on a standby (it went down mid-query, a recovery conflict cancelled the query)
  marks it down with exponential backoff and re-runs the read on the primary, in the request's
  own transaction: the client sees a normal answer. A standby lost just after a read completed
  (the session's closing ROLLBACK fails) marks it down too and keeps the answer. The probe brings
  it back after the backoff.
- **One snapshot per read.** A standby read runs in one REPEATABLE READ transaction (taken
  after any wait for a position), so a commit replayed during it is seen whole or not at all,
  and the checks a domain registers (`require`) see the same state as the read: the org's
  embedding model on the standby must be the one the request embedded its question with.
- **Without replicas nothing changes**: the reader runs the function on the request's session.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from fastapi import Request
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.kit.database.db import bind_principal, make_engine, make_sessionmaker, replayed_past, standby_status, wal_lsn
from app.kit.errors import BadRequest

if TYPE_CHECKING:
    from app.auth.principal import Principal
    from app.config import Settings

log = logging.getLogger("memscale.replicas")
T = TypeVar("T")
LSN_HEADER = "Memscale-LSN"
_LSN = re.compile(r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$")


def lsn_value(lsn: str) -> int:
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def parse_lsn(raw: str | None) -> str | None:
    """The Memscale-LSN a read presents, checked (a malformed one is a 400, never ignored)."""
    if raw is None:
        return None
    raw = raw.strip()
    if not _LSN.match(raw):
        raise BadRequest(f"{LSN_HEADER} must be a WAL position such as 0/16B3748 (as a write returned it)", code="invalid_lsn")
    return raw.upper()


@dataclass
class Replica:
    url: str
    engine: Engine
    sessions: Callable[[], Session]
    healthy: bool = False  # until the first probe says otherwise
    replay: int = 0  # last replayed position seen by a probe
    lag_bytes: int | None = None
    down_until: float = 0.0
    failures: int = 0
    reason: str = "not probed yet"
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        return make_url(self.url).render_as_string(hide_password=True)


class ReplicaSet:
    """The standbys of one API process, their health, and the probe thread."""

    def __init__(self, settings: Settings, primary: Engine, urls: list[str]):
        self.primary = primary
        self.max_lag = settings.replica_max_lag_bytes
        self.wait_s = settings.replica_wait_ms / 1000.0
        self.interval = settings.replica_check_interval_s
        self.backoff_max = settings.replica_backoff_max_s
        self.replicas: list[Replica] = []
        for url in urls:
            u = make_url(url)
            if "connect_timeout" not in u.query:  # an unreachable host must not hold a probe for long
                u = u.update_query_dict({"connect_timeout": "2"})
            eng = make_engine(u.render_as_string(hide_password=False), pool_size=settings.db_pool_size)
            self.replicas.append(Replica(url, eng, make_sessionmaker(eng)))
        self._rr = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stats = {"replica_reads": 0, "primary_reads": 0, "fallbacks": 0, "lsn_waits": 0, "stale_skips": 0}
        self._stats_lock = threading.Lock()

    # ---- health ---------------------------------------------------------------------------------
    def start(self) -> None:
        self.probe_all()
        self._thread = threading.Thread(target=self._loop, name="memscale-replica-probe", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for r in self.replicas:
            r.engine.dispose()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.probe_all()
            except Exception:
                log.warning("replica probe: the primary did not answer", exc_info=True)

    def probe_all(self) -> None:
        with self.primary.connect() as c:
            head = lsn_value(wal_lsn(c))
        now = time.monotonic()
        for r in self.replicas:
            if not r.healthy and now < r.down_until:
                continue
            self._probe(r, head)

    def _probe(self, r: Replica, head: int) -> None:
        try:
            with r.engine.connect() as c:
                in_recovery, replay = standby_status(c)
        except DBAPIError as e:
            self.mark_down(r, f"unreachable: {str(e.orig or e).splitlines()[0]}")
            return
        if not in_recovery or replay is None:
            self.mark_down(r, "not a streaming standby (not in recovery)")
            return
        r.replay = max(r.replay, lsn_value(replay))
        r.lag_bytes = max(0, head - r.replay)
        if r.lag_bytes > self.max_lag:
            self.mark_down(r, f"lagging {r.lag_bytes} bytes behind the primary (bound {self.max_lag})")
            return
        if not r.healthy:
            log.info("replica %s in use (lag %d bytes)", r.name, r.lag_bytes)
        r.healthy, r.failures, r.reason = True, 0, "ok"

    def mark_down(self, r: Replica, reason: str) -> None:
        with r.lock:
            r.failures += 1
            r.down_until = time.monotonic() + min(self.backoff_max, 0.5 * 2 ** (r.failures - 1))
            if r.healthy or r.reason != reason:
                log.warning("replica %s skipped: %s", r.name, reason)
            r.healthy, r.reason = False, reason

    def status(self) -> list[dict]:
        return [{"url": r.name, "healthy": r.healthy, "lag_bytes": r.lag_bytes, "reason": r.reason} for r in self.replicas]

    def _count(self, key: str) -> None:
        with self._stats_lock:
            self.stats[key] += 1

    # ---- reads ----------------------------------------------------------------------------------
    def _candidates(self) -> list[Replica]:
        up = [r for r in self.replicas if r.healthy]
        if len(up) > 1:
            start = next(self._rr) % len(up)
            up = up[start:] + up[:start]
        return up

    def run(self, principal: Principal, primary_db: Session, fn: Callable[[Session], T], lsn: str | None) -> T:
        want = lsn_value(lsn) if lsn else 0
        for r in self._candidates():
            rdb = r.sessions()
            try:
                if want > r.replay and not self._wait_for(r, lsn):
                    continue  # not replayed yet; another standby, else the primary
                # One snapshot for every statement of the read (and the checks): a commit
                # replayed meanwhile is seen whole or not at all.
                rdb.connection(execution_options={"isolation_level": "REPEATABLE READ"})
                bind_principal(rdb, principal)
                if not all(check(primary_db, rdb, principal) for check in _CHECKS):
                    self._count("stale_skips")
                    continue  # the standby has not replayed a state the primary's transaction relies on
                out = fn(rdb)
                self._count("replica_reads")
                return out
            except DBAPIError as e:
                self._count("fallbacks")
                self.mark_down(r, f"read failed: {str(e.orig or e).splitlines()[0]}")
            finally:
                self._close(r, rdb)
        self._count("primary_reads")
        return fn(primary_db)

    def _close(self, r: Replica, rdb: Session) -> None:
        """Ends the standby session without expiring the rows fn returned (no commit). Closing
        rolls the connection's read-only transaction back; a standby that went down right after
        the read finished fails that ROLLBACK. The read itself is complete, so its answer stands:
        the connection is dropped from the pool and the standby marked down, nothing is raised."""
        try:
            rdb.close()
        except DBAPIError as e:
            rdb.invalidate()
            self.mark_down(r, f"connection lost after a read: {str(e.orig or e).splitlines()[0]}")

    def _wait_for(self, r: Replica, lsn: str) -> bool:
        """Polls in a session of its own: the read's snapshot is taken after the wait."""
        self._count("lsn_waits")
        deadline = time.monotonic() + self.wait_s
        with r.sessions() as wdb:
            while True:
                if replayed_past(wdb, lsn):
                    r.replay = max(r.replay, lsn_value(lsn))
                    return True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.005)


Check = Callable[[Session, Session, "Principal"], bool]
_CHECKS: list[Check] = []


def require(check: Check) -> None:
    """Registers a check every standby read must pass: `check(primary_db, standby_db, principal)`,
    run in the read's snapshot on the standby; False sends the read to another standby or the
    primary (a state the request's primary transaction relies on that the standby has not
    replayed yet: the org's embedding model, app/embedders/service.py)."""
    if check not in _CHECKS:
        _CHECKS.append(check)


def replica_set(settings: Settings, primary: Engine) -> ReplicaSet | None:
    urls = [u.strip() for u in settings.read_replica_urls.split(",") if u.strip()]
    if not urls:
        return None
    from app.kit.database.pg import _sqlalchemy_url

    return ReplicaSet(settings, primary, [_sqlalchemy_url(u) for u in urls])


class Reader:
    """Runs a read-only function of a session where the caller's read should go (see the module
    docstring). `Reader(None, db, ...)` runs it on `db`."""

    def __init__(self, replicas: ReplicaSet | None, db: Session, principal: Principal, lsn: str | None = None):
        self.replicas, self.db, self.principal, self.lsn = replicas, db, principal, lsn

    def __call__(self, fn: Callable[[Session], T]) -> T:
        if self.replicas is None:
            return fn(self.db)
        return self.replicas.run(self.principal, self.db, fn, self.lsn)


def reads(request: Request, db: Session, principal: Principal) -> Reader:
    """The reader of one request: its standbys, its Memscale-LSN (checked even without standbys)."""
    lsn = parse_lsn(request.headers.get(LSN_HEADER))
    return Reader(getattr(request.app.state, "replicas", None), db, principal, lsn)


def on(db: Session) -> Callable[[Callable[[Session], T]], T]:
    """The reader that stays on `db` (callers without a request: jobs, the CLI, benches)."""
    return lambda fn: fn(db)


class LsnHeaderMiddleware:
    """Adds `Memscale-LSN` to a successful response whose request committed a write (get_db put
    the position in the request state)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def _send(msg):
            if msg["type"] == "http.response.start" and msg["status"] < 400:
                lsn = (scope.get("state") or {}).get("memscale_lsn")
                if lsn:
                    msg = {**msg, "headers": [*msg.get("headers", []), (b"memscale-lsn", lsn.encode())]}
            await send(msg)

        await self.app(scope, receive, _send)
