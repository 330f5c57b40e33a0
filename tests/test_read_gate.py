"""The per-key read gate (app/kit/http/read_gate.py; issue 41 M2's fairness bound): one key holder's
flood of searches runs `per_key` at a time, another key holder's read never waits for it, and the
queue is bounded (429 with Retry-After)."""

from __future__ import annotations

import threading
import time

import pytest

from app.kit.errors import RateLimited
from app.kit.http.read_gate import ReadGate


def _hold(gate: ReadGate, who: str, started: threading.Event, release: threading.Event, log: list) -> None:
    with gate.slot(who):
        log.append(("in", who))
        started.set()
        release.wait(10)
    log.append(("out", who))


def _one_running(**kw) -> tuple[ReadGate, threading.Event, threading.Thread]:
    """A gate whose key holder "k" runs one read until the returned event is set."""
    gate = ReadGate(**kw)
    release, started = threading.Event(), threading.Event()
    first = threading.Thread(target=_hold, args=(gate, "k", started, release, []))
    first.start()
    assert started.wait(5)
    return gate, release, first


def test_a_holders_second_read_waits_and_another_holder_does_not():
    gate = ReadGate(per_key=1, max_waiting=4)
    release, started = threading.Event(), threading.Event()
    log: list = []
    first = threading.Thread(target=_hold, args=(gate, "flooder", started, release, log))
    first.start()
    assert started.wait(5)
    second_in = threading.Event()
    second = threading.Thread(target=_hold, args=(gate, "flooder", second_in, release, log))
    second.start()
    time.sleep(0.2)
    assert not second_in.is_set()  # the flooder's second read waits for its first
    with gate.slot("victim"):  # another holder is not gated by the flooder's reads
        log.append(("in", "victim"))
    assert log == [("in", "flooder"), ("in", "victim")]
    release.set()
    first.join(5)
    assert second_in.wait(5)  # ... and runs once the first is done
    second.join(5)
    assert gate.running("flooder") == 0


def test_waiting_reads_run_in_arrival_order_and_use_while_waiting():
    gate, release, first = _one_running(per_key=1, max_waiting=8)
    order: list[int] = []
    waited: list[int] = []

    class Released:
        def __init__(self, i: int):
            self.i = i

        def __enter__(self):
            waited.append(self.i)

        def __exit__(self, *exc):
            return False

    def read(i: int) -> None:
        with gate.slot("k", while_waiting=lambda: Released(i)):
            order.append(i)

    threads = []
    for i in range(4):
        t = threading.Thread(target=read, args=(i,))
        t.start()
        threads.append(t)
        time.sleep(0.05)  # arrive in order
    release.set()
    for t in threads:
        t.join(5)
    assert order == [0, 1, 2, 3]
    assert sorted(waited) == [0, 1, 2, 3]  # every waiting read gave its connection back


def test_the_queue_is_bounded_with_retry_after():
    gate, release, first = _one_running(per_key=1, max_waiting=2, max_wait_s=5)
    waiters = [threading.Thread(target=_hold, args=(gate, "k", threading.Event(), release, [])) for _ in range(2)]
    for w in waiters:
        w.start()
    deadline = time.monotonic() + 5
    while len(gate._queues.get("k", ())) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(RateLimited) as e:
        with gate.slot("k"):
            pass
    assert e.value.status_code == 429 and e.value.code == "too_many_reads"
    assert int(e.value.headers["Retry-After"]) >= 1
    release.set()
    for t in (first, *waiters):
        t.join(5)
    assert gate.running("k") == 0


def test_a_wait_past_its_deadline_is_a_429():
    gate, release, first = _one_running(per_key=1, max_waiting=4, max_wait_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(RateLimited):
        with gate.slot("k"):
            pass
    assert time.monotonic() - t0 < 3
    release.set()
    first.join(5)
    with gate.slot("k"):  # the gate is usable again: nothing was left counted
        assert gate.running("k") == 1


def test_a_failure_on_getting_the_connection_back_does_not_keep_the_slot():
    """The read that waited gets its database connection back on leaving `while_waiting`; when
    that fails (PostgreSQL restarting) the request fails, and its slot must not stay taken, or
    every later read of that key holder would wait its whole deadline (found by the crash test)."""
    gate, release, first = _one_running(per_key=1, max_waiting=4, max_wait_s=2)

    class GoneOnExit:
        def __enter__(self):
            release.set()  # the first read ends while this one waits

        def __exit__(self, *exc):
            raise ConnectionError("database unavailable")

    with pytest.raises(ConnectionError):
        with gate.slot("k", while_waiting=GoneOnExit):
            pass
    first.join(5)
    assert gate.running("k") == 0
