"""Fair sharing of the API process between key holders for reads (search, context).

A search or context request costs CPU in this process (embedding the query, reading dates,
fusing the ranking) and in PostgreSQL. Issue 41 (M2): four concurrent loops of 2,000-character
queries from one member made another tenant's search p95 5-10x its unloaded value on two cores,
because the victim's request shared the CPU with all four. `ReadGate` lets each key holder run at
most `per_key` reads at once in this process; the rest of that holder's reads wait their turn in
arrival order. Another key holder's read never waits for the gate, so under one holder's flood it
shares the CPU with `per_key` of the flooder's requests instead of all of them.

- A waiting read holds no pooled database connection (`while_waiting`: the endpoint passes
  `app.kit.database.db.released`), so a flood cannot drain the pool by queueing.
- Bounded: more than `max_waiting` reads of one holder waiting, or a wait past `max_wait_s`, is a
  429 with `Retry-After` (one request's worth of time), never an unbounded queue.
- Per process, like the embedder's queue (docs/security.md): with several API processes a holder
  gets `per_key` reads in each.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from app.kit.errors import RateLimited


class ReadGate:
    def __init__(self, *, per_key: int = 1, max_waiting: int = 8, max_wait_s: float = 30.0):
        if per_key < 1:
            raise ValueError("per_key must be at least 1")
        self.per_key, self.max_waiting, self.max_wait_s = per_key, max_waiting, max_wait_s
        self._cv = threading.Condition()
        self._running: dict[str, int] = {}
        self._queues: dict[str, deque] = {}
        self._cost = 0.1  # seconds one read takes (EWMA): the Retry-After of a refusal

    def running(self, who: str) -> int:
        with self._cv:
            return self._running.get(who, 0)

    @contextmanager
    def slot(self, who: str, *, while_waiting: Callable[[], AbstractContextManager] = nullcontext) -> Iterator[None]:
        """Run the block as one of `who`'s at most `per_key` reads; wait (inside `while_waiting`)
        when `who` already runs that many."""
        with self._cv:
            free = self._running.get(who, 0) < self.per_key and not self._queues.get(who)
            if free:
                self._running[who] = self._running.get(who, 0) + 1
        held, t0 = free, time.monotonic()
        try:
            if not free:
                with while_waiting():  # its exit may fail (the database gone): the slot is held by then
                    self._wait(who)
                    held, t0 = True, time.monotonic()
            yield
        finally:
            if held:
                with self._cv:
                    self._cost = 0.8 * self._cost + 0.2 * (time.monotonic() - t0)
                    self._running[who] -= 1
                    if not self._running[who]:
                        del self._running[who]
                    self._cv.notify_all()

    def _wait(self, who: str) -> None:
        ticket = object()
        deadline = time.monotonic() + self.max_wait_s
        with self._cv:
            q = self._queues.setdefault(who, deque())
            if len(q) >= self.max_waiting:
                raise RateLimited(
                    f"{len(q)} of your searches are already waiting; retry later",
                    retry_after_s=self._cost * (len(q) + 1),
                    code="too_many_reads",
                )
            q.append(ticket)
            try:
                while q[0] is not ticket or self._running.get(who, 0) >= self.per_key:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise RateLimited(
                            "your earlier searches are still running; retry later",
                            retry_after_s=self._cost * len(q),
                            code="too_many_reads",
                        )
                    self._cv.wait(left)
                self._running[who] = self._running.get(who, 0) + 1
            finally:
                q.remove(ticket)
                if not q:
                    del self._queues[who]
                self._cv.notify_all()
