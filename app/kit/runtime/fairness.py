"""Fair sharing of the embedding model between tenants (issue 15: one member's three 1 MB batches
made another user's search take 101 s instead of 0.1 s; the model ran one call at a time and a
500-item batch held it for ~50 s).

`FairEmbedder` wraps any Embedder:
- **Reads first.** `embed(texts)` (a query: search, context, tools) never waits for a queue of
  batches. Waiting reads go in order of arrival plus
  their cost (READ_TOKEN_S per estimated token): a short query does not wait behind a queue of
  2,000-character ones (issue 41: four loops of them made another tenant's search 10x slower),
  and a long one still goes once it has waited as long as it costs. Up to `max_reads` reads are
  embedded side by side, and beside a write slice (a query runs on one thread, and the local
  model runs queries outside its batch lock), so a short query waits neither for another
  tenant's long query nor for a slice of another tenant's batch.
- **Writes in slices, round robin by key holder.** `embed_write(who, texts)` embeds a batch in
  slices of at most `slice_tokens` estimated tokens; between slices, waiting reads go first and
  then the next key holder in turn, so a tenant flooding batches gets its share, not the model.
- **Bounded queue.** Items admitted but not yet embedded are capped per key holder and in all;
  over the cap, the request is refused at once with 429 and a `Retry-After` estimated from the
  measured embedding rate, instead of queueing without bound.

Per process: with several API processes each has its own queue (docs/security.md).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque

import numpy as np

from app.kit.errors import RateLimited
from app.kit.stages import stage

READ_TOKEN_S = 0.0005  # a read's place in line moves back by its estimated embedding time (~0.5 ms a token)


def _tokens(text: str) -> int:
    return min(256, len(text) // 4 + 2)  # MiniLM truncates at 256 word pieces; chars/4 is close enough


class FairEmbedder:
    def __init__(
        self, inner, *, slice_tokens: int = 512, max_pending_per_key: int = 1000, max_pending: int = 4000, max_reads: int = 2
    ):
        self.inner, self.dim, self.model = inner, inner.dim, getattr(inner, "model", None)
        self.slice_tokens, self.max_pending_per_key, self.max_pending = slice_tokens, max_pending_per_key, max_pending
        self.max_reads = max_reads  # reads embedded side by side (one thread each), beside a write slice too
        self._cv = threading.Condition()
        self._busy = False  # a write slice is being embedded
        self._reading = 0  # reads being embedded
        self._reads_waiting = 0
        self._reads: list[tuple[float, int]] = []  # waiting reads: (arrival + cost, sequence), a heap
        self._seq = itertools.count()
        self._turns: deque[str] = deque()  # key holders with slices waiting, in turn order
        self._tickets: dict[str, deque] = {}  # per key holder, its waiting slices (FIFO)
        self._pending: dict[str, int] = {}  # items admitted, not yet embedded
        self._rate = 50.0  # items/s, measured (EWMA)

    # ---- reads ------------------------------------------------------------------------------
    def idle(self) -> bool:
        """Whether a read now would start at once: nothing embedding, nothing waiting (and the
        model itself idle: another caller may hold it directly)."""
        with self._cv:
            free = self._reading < self.max_reads and not self._reads_waiting
        inner = getattr(self.inner, "idle", None)
        return free and (inner is None or inner())

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._read(self.inner.embed, texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """`embed` for search queries (a model with a query prefix embeds them differently)."""
        return self._read(getattr(self.inner, "embed_queries", self.inner.embed), texts)

    def _read(self, run, texts: list[str]) -> np.ndarray:
        ticket = (time.monotonic() + READ_TOKEN_S * sum(_tokens(t) for t in texts), next(self._seq))
        with self._cv:
            self._reads_waiting += 1
            heapq.heappush(self._reads, ticket)
            try:
                while self._reading >= self.max_reads or self._reads[0] != ticket:
                    self._cv.wait()
            finally:
                self._reads_waiting -= 1
                self._reads.remove(ticket)
                heapq.heapify(self._reads)
                self._cv.notify_all()  # the next read in line may be waiting on this one
            self._reading += 1
        try:
            return run(texts)
        finally:
            with self._cv:
                self._reading -= 1
                self._cv.notify_all()

    # ---- writes -----------------------------------------------------------------------------
    def embed_write(self, who: str, texts: list[str]) -> np.ndarray:
        if not texts:
            return self.inner.embed(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for idx, vecs in self.write_slices(who, texts):
            out[idx] = vecs
        return out

    def write_slices(self, who: str, texts: list[str]):
        """`embed_write` one slice at a time, as each is done: (indices into `texts`, their vectors),
        so that a caller can store a slice while the next is embedded. The texts are taken longest
        first: each slice holds texts of about one length and the model pads little (slices of a
        batch in arrival order cost up to twice the whole batch embedded at once). All admitted at
        once (a 429 before anything is embedded); what is not embedded is released on exit."""
        if not texts:
            return
        self._admit(who, len(texts))
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        done = 0
        try:
            for idx in self._slices(order, texts):
                with stage("fairness"):
                    self._take_turn(who)
                t0 = time.perf_counter()
                try:
                    with stage("model"):
                        vecs = self.inner.embed([texts[i] for i in idx])
                finally:
                    dt = time.perf_counter() - t0
                    with self._cv:
                        if dt > 0:
                            self._rate = 0.8 * self._rate + 0.2 * (len(idx) / dt)
                        self._pending[who] -= len(idx)
                        done += len(idx)
                    self._release()
                yield idx, vecs
        finally:
            with self._cv:
                self._pending[who] -= len(texts) - done
                if self._pending[who] <= 0:
                    del self._pending[who]

    def _admit(self, who: str, n: int) -> None:
        with self._cv:
            mine, total = self._pending.get(who, 0), sum(self._pending.values())
            if mine + n > self.max_pending_per_key or total + n > self.max_pending:
                wait = (mine if mine + n > self.max_pending_per_key else total) / max(self._rate, 1.0)
                raise RateLimited(
                    f"embedding queue full ({mine} of your items waiting); retry later", retry_after_s=wait, code="queue_full"
                )
            self._pending[who] = mine + n

    def _slices(self, order: list[int], texts: list[str]):
        """Indices of `order`, cut into slices of at most `slice_tokens` estimated tokens."""
        cur, cost = [], 0
        for i in order:
            c = _tokens(texts[i])
            if cur and cost + c > self.slice_tokens:
                yield cur
                cur, cost = [], 0
            cur.append(i)
            cost += c
        if cur:
            yield cur

    def _take_turn(self, who: str) -> None:
        ticket = object()
        with self._cv:
            q = self._tickets.setdefault(who, deque())
            q.append(ticket)
            if who not in self._turns:
                self._turns.append(who)
            while self._busy or self._reads_waiting or self._turns[0] != who or q[0] is not ticket:
                self._cv.wait()
            q.popleft()
            self._turns.popleft()
            if q:
                self._turns.append(who)  # back of the line for its next slice
            else:
                del self._tickets[who]
            self._busy = True

    def _release(self) -> None:
        with self._cv:
            self._busy = False
            self._cv.notify_all()
