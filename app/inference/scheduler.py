"""Fair sharing of the one engine between the tier's callers (one member's token ran
a 3,952-token prompt for 67.6 s under a global lock, and another tenant's 1 s request waited 101 s).

Design choices:
- **One engine, one holder at a time** (the old lock's purpose: a forward pass already uses every
  core). A request holds the *turn* for all its engine work (tokenising, chunk lookup, prefill,
  decoding), so nothing of two requests ever runs at once.
- **Preemption at decoder-layer boundaries.** :meth:`FairScheduler.attach` puts a forward
  pre-hook on each decoder layer of the model; in the holder's thread it is a yield point: once
  the holder has run for ``quantum_s`` and another request is eligible, the turn passes on and the
  holder waits for its next one. Every path through the model (a prefill chunk, a decode step, a
  CacheBlend pass, a chunk's KV) goes through the layers, so one request's long prompt or long
  generation is cut into slices of at most a quantum plus one layer; the engine also prefills a
  long segment in chunks (``EngineConfig.prefill_chunk_tokens``) so that one layer stays short.
  Each request keeps its own KV state; pausing between layers changes no result.
- **Who runs next: least served first**, by org, then by token within equal orgs, then the one
  that waited longest. Service is measured engine time. A key that becomes active starts at the
  least service of the keys already active (no credit banked while idle, no debt kept), so under
  one org's flood another org's request gets at least half the engine from its first quantum.
- **Bounded.** Per token and per org: how many requests may hold KV and take turns at once
  (``active_*``), how many more may wait to start (``queued_*``), and a token-bucket rate per
  minute; in all, ``active_total`` and ``queued_total``. Beyond a bound the request is refused
  at once (:class:`Busy`, answered 429 with ``Retry-After``) instead of queueing without bound.
  The operator (the shared key) is one more org with its own, higher limits.

Per process: each tier process schedules its own engine.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from app.kit.errors import RateLimited
from app.kit.http.limits import RateLimiter

OPERATOR = "operator"  # the fairness key of the shared key's calls (org and token alike)


class Busy(Exception):
    """A bound or a rate is exceeded: refuse now (429), nothing was queued."""

    def __init__(self, message: str, retry_after_s: float = 1.0):
        super().__init__(message)
        self.message, self.retry_after_s = message, retry_after_s


@dataclass(frozen=True)
class Limits:
    active_per_token: int = 2  # requests of one token holding KV and taking turns at once
    active_per_org: int = 4
    queued_per_token: int = 2  # more may wait to start; beyond that: 429
    queued_per_org: int = 8
    requests_per_minute_token: int = 60  # token bucket; 0 = off
    requests_per_minute_org: int = 600


OPERATOR_LIMITS = Limits(
    active_per_token=4,
    active_per_org=4,
    queued_per_token=16,
    queued_per_org=16,
    requests_per_minute_token=0,
    requests_per_minute_org=0,
)


@dataclass(frozen=True)
class SchedulerConfig:
    tenant: Limits = field(default_factory=Limits)  # every handoff token and its org
    operator: Limits = OPERATOR_LIMITS
    # In all: requests holding KV at once (memory), and waiting to start. Each waiting request
    # holds a worker thread, so active + queued stays under the thread pool's 40.
    active_total: int = 8
    queued_total: int = 24
    quantum_s: float = 0.05  # a holder keeps the turn at least this long when others wait


@dataclass(eq=False)
class Ticket:
    """One admitted request."""

    org: str
    token: str
    limits: Limits
    started: bool = False  # has held the turn (holds KV, counts as active)
    done: bool = False
    waited_since: int = 0  # order among waiters (a counter)
    granted_at: float = 0.0

    @property
    def keys(self) -> tuple[str, str]:
        return f"o:{self.org}", f"t:{self.org}:{self.token}"


class FairScheduler:
    def __init__(self, config: SchedulerConfig | None = None, *, clock=time.perf_counter):
        self.config = config or SchedulerConfig()
        self._clock = clock
        self._cv = threading.Condition()
        self._local = threading.local()
        self._holder: Ticket | None = None
        self._waiting: list[Ticket] = []
        self._tickets: set[Ticket] = set()
        self._total: dict[str, int] = {}  # key -> admitted, not done
        self._active: dict[str, int] = {}  # key -> started, not done
        self._served: dict[str, float] = {}  # key -> engine seconds (relative; see _join)
        self._order = itertools.count()
        self._rates: dict[tuple[str, int], RateLimiter] = {}

    # ---- admission --------------------------------------------------------------------------
    def admit(self, org: str, token: str, *, operator: bool = False, bounded: bool = True) -> Ticket:
        """A ticket for one request, or :class:`Busy` at once (nothing counted). ``bounded=False``
        (the operator's erasures: never refused) skips the bounds and rates, not the turn."""
        lim = self.config.operator if operator else self.config.tenant
        t = Ticket(org=OPERATOR if operator else org, token=OPERATOR if operator else token, limits=lim)
        okey, tkey = t.keys
        with self._cv:
            if bounded:
                self._check_bounds(t)
            for key in (okey, tkey):
                self._join(key)
                self._total[key] = self._total.get(key, 0) + 1
            self._tickets.add(t)
        return t

    def _check_bounds(self, t: Ticket) -> None:
        lim, (okey, tkey) = t.limits, t.keys
        if self._total.get(tkey, 0) >= lim.active_per_token + lim.queued_per_token:
            raise Busy("too many requests in flight for this token; retry later", self._retry_s())
        if self._total.get(okey, 0) >= lim.active_per_org + lim.queued_per_org:
            raise Busy("too many requests in flight for this organisation; retry later", self._retry_s())
        if len(self._tickets) >= self.config.active_total + self.config.queued_total:
            raise Busy("the inference tier is at capacity; retry later", self._retry_s())
        self._take_rate(tkey, lim.requests_per_minute_token, okey, lim.requests_per_minute_org)

    def _rate(self, key: str, per_minute: int) -> RateLimiter:
        lim = self._rates.get((key[0], per_minute))
        if lim is None:
            lim = self._rates[(key[0], per_minute)] = RateLimiter(per_minute)
        return lim

    def _take_rate(self, tkey: str, t_rpm: int, okey: str, o_rpm: int) -> None:
        """Both buckets have a unit, or Busy with nothing taken."""
        checks = [(self._rate(k, rpm), k) for k, rpm in ((tkey, t_rpm), (okey, o_rpm)) if rpm > 0]
        wait = max((lim.blocked(k) for lim, k in checks), default=0.0)
        if wait > 0:
            raise Busy("rate limit exceeded; slow down", wait)
        for lim, k in checks:
            try:
                lim.check(k)
            except RateLimited:  # cannot happen under self._cv after blocked(); the same answer if it did
                raise Busy("rate limit exceeded; slow down", 1.0) from None

    def _retry_s(self) -> float:
        return max(1.0, self.config.quantum_s * len(self._tickets))

    def _join(self, key: str) -> None:
        """A key that becomes active starts at the least service of the active keys of its level
        (orgs among orgs, an org's tokens among that org's tokens)."""
        if self._total.get(key, 0) > 0:
            return
        prefix = key[: key.rfind(":") + 1] if key.startswith("t:") else "o:"
        peers = [self._served[k] for k in self._served if k.startswith(prefix) and self._total.get(k, 0) > 0]
        self._served[key] = min(peers, default=0.0)

    # ---- turns ------------------------------------------------------------------------------
    @contextmanager
    def turn(self, ticket: Ticket) -> Iterator[None]:
        """Hold the engine for ``ticket`` (waiting for its first turn); the ticket is done after."""
        with self._cv:
            if ticket.done:
                raise RuntimeError("ticket already closed")
            self._enqueue(ticket)
            if self._holder is None:
                self._grant_next()
            while self._holder is not ticket:
                self._cv.wait()
        self._local.ticket = ticket
        try:
            yield
        finally:
            self._local.ticket = None
            self.close(ticket)

    def close(self, ticket: Ticket) -> None:
        """Release and forget ``ticket`` (idempotent; also for one that never took a turn)."""
        with self._cv:
            if ticket.done:
                return
            ticket.done = True
            if self._holder is ticket:
                self._account(ticket)
                self._holder = None
            if ticket in self._waiting:
                self._waiting.remove(ticket)
            self._tickets.discard(ticket)
            for key in ticket.keys:
                self._total[key] -= 1
                if ticket.started:
                    self._active[key] -= 1
                if not self._total[key]:
                    del self._total[key]
                    self._served.pop(key, None)
                    self._active.pop(key, None)
            if self._holder is None:
                self._grant_next()

    def checkpoint(self) -> None:
        """A yield point (between decoder layers): the holder passes the turn on once it has run
        a quantum and another request is eligible. A no-op in any other thread."""
        t: Ticket | None = getattr(self._local, "ticket", None)
        if t is None or self._clock() - t.granted_at < self.config.quantum_s:
            return
        with self._cv:
            if self._holder is not t:
                return
            self._account(t)
            if not any(w is not t and self._eligible(w) for w in self._waiting):
                return
            self._holder = None
            self._enqueue(t)
            self._grant_next()
            while self._holder is not t:
                self._cv.wait()

    def _enqueue(self, t: Ticket) -> None:
        t.waited_since = next(self._order)
        self._waiting.append(t)

    def _eligible(self, t: Ticket) -> bool:
        if t.started:
            return True
        okey, tkey = t.keys
        return (
            self._active.get(tkey, 0) < t.limits.active_per_token
            and self._active.get(okey, 0) < t.limits.active_per_org
            and sum(1 for x in self._tickets if x.started) < self.config.active_total
        )

    def _grant_next(self) -> None:
        candidates = [t for t in self._waiting if self._eligible(t)]
        if not candidates:
            return
        nxt = min(candidates, key=lambda t: (self._served[t.keys[0]], self._served[t.keys[1]], t.waited_since))
        self._waiting.remove(nxt)
        if not nxt.started:
            nxt.started = True
            for key in nxt.keys:
                self._active[key] = self._active.get(key, 0) + 1
        nxt.granted_at = self._clock()
        self._holder = nxt
        self._cv.notify_all()

    def _account(self, t: Ticket) -> None:
        now = self._clock()
        for key in t.keys:
            self._served[key] += now - t.granted_at
        t.granted_at = now

    # ---- the model's yield points -----------------------------------------------------------
    def attach(self, model) -> list:
        """Yield points before every decoder layer of ``model`` (its own modules, as blending
        calls them directly); returns the hook handles (:meth:`detach`)."""
        layers = getattr(getattr(model, "model", None), "layers", None)
        modules = list(layers) if layers is not None else [model]
        return [m.register_forward_pre_hook(lambda _m, _args: self.checkpoint()) for m in modules]

    @staticmethod
    def detach(handles: list) -> None:
        for h in handles:
            h.remove()

    def stats(self) -> dict:
        with self._cv:
            return {
                "in_flight": len(self._tickets),
                "active": sum(1 for t in self._tickets if t.started),
                "waiting": len(self._waiting),
                "holder": self._holder.org if self._holder else None,
            }
