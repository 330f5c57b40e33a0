"""local/e5-small: search queries are embedded as queries (`query: `), stored texts as passages
(`passage: `), at every place a query is embedded; MiniLM embeds both alike. The engine's
vectors are the same across processes, batching and thread counts, and queries run beside a batch."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

QUERY = "When did Caroline go to the LGBTQ support group?"
TURNS = [
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "Melanie: Wow, that's cool, Caroline! What happened that was so awesome?",
    "",
    "a",
    "the kiln log of the glaze firing, cone six, held for twenty minutes; " * 60,  # > 512 tokens: windows
    "Melanie: I painted a lake sunrise last year and showed it at the local gallery.",
    "Caroline: Pottery class on Sunday.",
]


@pytest.fixture(scope="module")
def e5():
    from app.kit.runtime.e5 import E5Embedder

    return E5Embedder()


class Recording:
    """The real e5 embedder, noting which of its methods each text went through."""

    def __init__(self, inner):
        self.inner, self.dim, self.model, self.calls = inner, inner.dim, inner.model, []

    def idle(self) -> bool:
        return self.inner.idle()

    def embed(self, texts):
        self.calls += [("embed", t) for t in texts]
        return self.inner.embed(texts)

    def embed_queries(self, texts):
        self.calls += [("embed_queries", t) for t in texts]
        return self.inner.embed_queries(texts)


def test_queries_and_passages_differ_and_minilm_embeds_both_alike(e5, embedder):
    q, p = e5.embed_queries([QUERY])[0], e5.embed([QUERY])[0]
    assert q.shape == (384,) and q.dtype == np.float32
    assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-5
    assert float(np.abs(q - p).max()) > 1e-2  # the prefix changes the vector
    np.testing.assert_array_equal(embedder.embed_queries([QUERY]), embedder.embed([QUERY]))


def test_a_search_query_is_embedded_as_a_query(app, client, world, e5):
    """Both paths of app.search.prepare.embed_query: beside the request's first statements (the
    embedder idle) and after giving the connection back (the embedder busy with a batch)."""
    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal
    from app.kit.runtime.embedding import vector
    from app.search.prepare import embed_query

    a = world.user(world.org())
    p = Principal(org_id=a.org_id, user_id=a.user_id, name=a.name, roles=(), groups=(), clearances=())
    want, passage = e5.embed_queries([QUERY])[0], e5.embed([QUERY])[0]
    with app.state.sessions() as db:
        bind_principal(db, p)
        got = vector(embed_query(db, p, e5, QUERY))
        np.testing.assert_array_equal(got, want)
        assert float(np.abs(got - passage).max()) > 1e-2
        with e5._lock:  # a batch holds the engine: the query waits without its connection
            busy = vector(embed_query(db, p, e5, QUERY))
        np.testing.assert_array_equal(busy, want)


def test_the_session_tools_search_embeds_a_query(app, client, world, e5, settings):
    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal
    from app.resources import Resources
    from app.sessions.tools import _search

    a = world.user(world.org())
    p = Principal(org_id=a.org_id, user_id=a.user_id, name=a.name, roles=(), groups=(), clearances=())
    rec = Recording(e5)
    with app.state.sessions() as db:
        bind_principal(db, p)
        _search(db, p, Resources(settings, _embedder=rec), QUERY, 5, ["memory"])
    assert rec.calls == [("embed_queries", QUERY)]


def test_the_fair_lane_keeps_the_query_prefix(e5):
    from app.kit.runtime.fairness import FairEmbedder

    fair = FairEmbedder(e5)
    np.testing.assert_array_equal(fair.embed_queries([QUERY]), e5.embed_queries([QUERY]))
    np.testing.assert_array_equal(fair.embed([QUERY]), e5.embed([QUERY]))


def test_vectors_do_not_depend_on_batching_or_threads(e5):
    batch = e5.embed(TURNS)  # batch path: the lock, every OpenMP thread
    single = np.stack([e5.embed([t])[0] for t in TURNS])  # one text, one thread
    assert float(np.abs(batch - single).max()) <= 1e-5
    e5._threads(1)  # this thread's OpenMP setting only: the batch on one thread
    try:
        one = e5._e5.encode(TURNS, is_query=False)
    finally:
        e5._threads(e5._many)
    assert float(np.abs(batch - one).max()) <= 1e-5
    assert e5.embed([]).shape == (0, 384)


_CHILD = """
import hashlib, sys
from app.kit.runtime.e5 import E5Embedder
from tests.test_embedding_e5 import QUERY, TURNS
e = E5Embedder()
print(hashlib.sha256(e.embed(TURNS).tobytes() + e.embed_queries([QUERY]).tobytes()).hexdigest())
"""


def test_two_processes_give_the_same_bytes(e5):
    import hashlib

    here = hashlib.sha256(e5.embed(TURNS).tobytes() + e5.embed_queries([QUERY]).tobytes()).hexdigest()
    runs = [subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True) for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == [here, here]


def test_queries_run_beside_a_batch_and_side_by_side(e5):
    """The handle is re-entrant: queries do not wait for a batch holding the engine, and queries
    from several threads at once give the single-threaded vectors."""
    want = e5.embed_queries(TURNS[:4])
    got: dict[int, list] = {}

    def ask(i: int) -> None:
        got[i] = [e5.embed_queries(TURNS[:4]) for _ in range(5)]

    with e5._lock:  # a batch is running
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
    for runs in got.values():
        for r in runs:
            np.testing.assert_array_equal(r, want)
    assert len(got) == 3
