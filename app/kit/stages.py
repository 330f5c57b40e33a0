"""A light stage timer for the write path: `with stage("rows"): ...` adds the block's time to the
recorder of the current context, if any. Off (no `recording()` around the call) it costs one
ContextVar lookup. Times are exclusive: a stage opened inside another pauses the outer one, so the
stages of one thread add up to that thread's time. Work handed to another thread carries the
recorder with `carried(fn)` (its stages then overlap the caller's: a pipeline).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Stages:
    """Seconds and calls per stage name, summed over every thread that recorded into it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def add(self, name: str, seconds: float, calls: int = 1) -> None:
        with self._lock:
            self.seconds[name] += seconds
            self.calls[name] += calls


_RECORDER: contextvars.ContextVar[Stages | None] = contextvars.ContextVar("memscale_stages", default=None)
_OPEN: contextvars.ContextVar[list | None] = contextvars.ContextVar("memscale_stage_open", default=None)


@contextmanager
def recording(into: Stages | None = None) -> Iterator[Stages]:
    """Record the stages of the block (this context and what it hands on with `carried`)."""
    rec = into if into is not None else Stages()
    token, open_token = _RECORDER.set(rec), _OPEN.set(None)
    try:
        yield rec
    finally:
        _OPEN.reset(open_token)
        _RECORDER.reset(token)


@contextmanager
def stage(name: str, *, scope: bool = False) -> Iterator[None]:
    """Time the block as `name`; with `scope`, the stages opened inside it are named `name.inner`
    (the model's time for the items apart from its time for their vocabulary)."""
    rec = _RECORDER.get()
    if rec is None:
        yield
        return
    outer = _OPEN.get()  # [name, start, scope] of the enclosing stage of this context
    now = time.perf_counter()
    if outer is not None:
        rec.add(outer[0], now - outer[1], calls=0)
        if outer[2]:
            name = f"{outer[0]}.{name}"
    frame = [name, now, scope]
    token = _OPEN.set(frame)
    try:
        yield
    finally:
        end = time.perf_counter()
        rec.add(name, end - frame[1])
        _OPEN.reset(token)
        if outer is not None:
            outer[1] = end


def carried(fn: Callable) -> Callable:
    """`fn` bound to the caller's recorder, for another thread (no enclosing stage there)."""
    rec = _RECORDER.get()
    if rec is None:
        return fn

    def run(*args, **kwargs):
        ctx = contextvars.copy_context()
        return ctx.run(_run_recorded, rec, fn, args, kwargs)

    return run


def _run_recorded(rec: Stages, fn: Callable, args: tuple, kwargs: dict):
    with recording(rec):
        return fn(*args, **kwargs)
