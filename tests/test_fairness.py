"""Fair embedding (app/kit/runtime/fairness.py): reads wait for at most one write slice, writers take
turns, and a full queue is a 429 with Retry-After at once. The scheduling is checked with a
recording embedder (the order of calls is the property); the real model path runs through the
API in every other test."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from app.kit.errors import RateLimited
from app.kit.runtime.fairness import FairEmbedder


class Recording:
    dim = 4

    def __init__(self, per_item_s: float = 0.01):
        self.calls: list[list[str]] = []
        self.per_item_s = per_item_s
        self.lock = threading.Lock()

    def embed(self, texts):
        with self.lock:
            self.calls.append(list(texts))
        time.sleep(self.per_item_s * len(texts))
        return np.ones((len(texts), self.dim), dtype=np.float32)


def test_a_read_waits_for_one_slice_not_the_batch():
    inner = Recording(per_item_s=0.01)
    fair = FairEmbedder(inner, slice_tokens=4 * 5)  # 4 short texts a slice (5 estimated tokens each)
    batch = [f"w{i} xxxxxxxxxxxx" for i in range(200)]  # ~2 s of embedding
    t = threading.Thread(target=fair.embed_write, args=("flooder", batch))
    t.start()
    time.sleep(0.2)
    t0 = time.perf_counter()
    out = fair.embed(["query"])
    waited = time.perf_counter() - t0
    t.join()
    assert out.shape == (1, 4)
    assert waited < 0.5, waited  # one slice (~0.04 s) plus scheduling, not the ~2 s batch
    assert max(len(c) for c in inner.calls) <= 4 and sum(len(c) for c in inner.calls) == 201


def test_writers_take_turns():
    inner = Recording(per_item_s=0.005)
    fair = FairEmbedder(inner, slice_tokens=2 * 10)
    a = threading.Thread(target=fair.embed_write, args=("a", [f"a{i} xxxxxxxxxxxx" for i in range(40)]))
    a.start()
    time.sleep(0.02)
    b = threading.Thread(target=fair.embed_write, args=("b", [f"b{i} xxxxxxxxxxxx" for i in range(6)]))
    b.start()
    a.join()
    b.join()
    order = [c[0][0] for c in inner.calls]
    last_b = max(i for i, x in enumerate(order) if x == "b")
    assert last_b < 12, order  # b's 3 slices interleave with a's 20, they do not wait for all of them


def test_a_full_queue_is_refused_at_once_with_retry_after():
    inner = Recording(per_item_s=0.01)
    fair = FairEmbedder(inner, slice_tokens=100, max_pending_per_key=100, max_pending=150)
    t = threading.Thread(target=fair.embed_write, args=("flooder", ["x"] * 90))  # ~0.9 s in 2 slices
    t.start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    with pytest.raises(RateLimited) as e:
        fair.embed_write("flooder", ["x"] * 20)
    assert time.perf_counter() - t0 < 0.1 and int(e.value.headers["Retry-After"]) >= 1
    with pytest.raises(RateLimited):
        fair.embed_write("third", ["z"] * 100)  # over the total cap (90 + 100 > 150)
    fair.embed_write("other", ["y"] * 20)  # another key holder within the caps still gets in
    t.join()
    fair.embed_write("flooder", ["x"] * 20)  # drained: admitted again
    assert fair._pending == {}


def test_a_failing_slice_releases_its_items():
    class Failing(Recording):
        def embed(self, texts):
            raise RuntimeError("model crashed")

    fair = FairEmbedder(Failing(), slice_tokens=10)
    with pytest.raises(RuntimeError):
        fair.embed_write("k", ["a", "b", "c"])
    assert fair._pending == {} and not fair._busy


def test_batches_are_charged_by_items(settings, embedder, world, admin_engine):
    from fastapi.testclient import TestClient

    from app.main import create_app
    from tests.helpers import count, ep

    org = world.org()
    alice, bob = world.user(org), world.user(org)
    app = create_app(settings.model_copy(update={"ingest_items_per_minute": 30}), embedder=embedder)
    with TestClient(app) as c:
        assert c.post("/v1/episodes/batch", json={"items": [ep(f"n{i}") for i in range(25)]}, headers=alice.h).status_code == 201
        r = c.post("/v1/episodes/batch", json={"items": [ep(f"m{i}") for i in range(10)]}, headers=alice.h)
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        assert c.post("/v1/episodes/batch", json={"items": [ep("b")]}, headers=bob.h).status_code == 201
    assert count(admin_engine, "episodes", alice.org_id) == 26
