"""Chunk KV store: each chunk's KV computed alone, keyed by (KV id, sha256 of the text).

Design choices:
- Content addressing: the key is ``sha256(text.encode("utf-8")).hexdigest()``, the same content
  hash the service stores on knowledge chunks, so the service hands over hashes, not text.
- One safetensors file per chunk, ``<root>/<kv_id>/<hash[:2]>/<hash>.safetensors``, with
  tensors ``kv`` (layers, 2, kv_heads, T, head_dim) and ``token_ids`` (T,), and metadata
  (format, version, KV id, hash) that is checked on load. The KV id is the engine's
  ``kv_id`` (checkpoint + dtype: KV computed in bf16 is not fp32 KV); files written before the
  field was renamed carry it as ``model_id`` and still load. Written to a temp file and renamed,
  so a reader never sees half a file. Never pickles.
- Two LRU tiers with byte limits: RAM (an OrderedDict of tensors) over disk (files; recency is
  the file's mtime, touched on every hit). A disk hit is promoted to RAM. Items larger than a
  tier's limit skip that tier. Lookups fall through to the file system, so chunks written by
  another process (the bootstrap worker through :func:`precompute_chunks`) are found.
- ``delete(hash)`` removes a chunk from both tiers (used by right-to-be-forgotten).
- Thread-safe behind one lock; the KV itself is computed by the engine (``encode_chunk``) outside
  it, since the server's scheduler may pause a computation between layers while other requests
  read the store; a chunk deleted meanwhile is not stored when its computation ends.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from app.inference.kv import ChunkKV

log = logging.getLogger(__name__)

FORMAT, VERSION = "memscale-chunk-kv", "1"
_HASH_RE = re.compile(r"^[0-9a-f]{64}$")
# what follows "<model_id>-" in a kv_id (app.inference.engine.Engine: dtype, then the anchor's digest)
_SAME_CHECKPOINT = re.compile(r"(float16|bfloat16|float32|float64)(-a[0-9a-f]{12})?")


class ChunkNotFound(KeyError):
    """No stored KV for this content hash (never computed, evicted, or deleted)."""


class ChunkEncoder(Protocol):
    model_id: str  # the checkpoint: its tokenizer fixes a chunk's token ids
    kv_id: str  # the checkpoint + how its KV is computed (dtype, anchor)

    def encode_chunk(self, text: str) -> ChunkKV: ...

    def chunk_kv(self, ids: torch.Tensor) -> torch.Tensor: ...


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def is_content_hash(value: str) -> bool:
    return bool(_HASH_RE.match(value))


@dataclass(frozen=True)
class StoreConfig:
    root: Path  # chunk files live under root/<kv_id>/
    mem_bytes: int = 2 * 2**30  # RAM tier limit
    disk_bytes: int = 20 * 2**30  # disk tier limit


class ChunkStore:
    def __init__(self, encoder: ChunkEncoder, config: StoreConfig):
        self.encoder, self.config = encoder, config
        self.kv_id = encoder.kv_id
        self.dir = Path(config.root) / self.kv_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._mem: OrderedDict[str, ChunkKV] = OrderedDict()  # LRU order: oldest first
        self._mem_bytes = 0
        self._disk: OrderedDict[str, int] = OrderedDict()  # hash -> file bytes, oldest first
        self._disk_bytes = 0
        self._busy: dict[str, int] = {}  # hash -> computations under way outside the lock
        self._erased: set[str] = set()  # hashes deleted while being computed
        self._scan_disk()

    # ---- public API ---------------------------------------------------------------------------
    def put(self, text: str) -> str:
        """Compute (if absent) and store the chunk's KV; return its content hash."""
        h = content_hash(text)
        with self._lock:
            if self.has(h):
                self._touch(h)  # asked for now: the most recent in both tiers, as a get would make it
                return h
        with self._computing(h):
            chunk = self.encoder.encode_chunk(text)
            self._keep(h, chunk)
        return h

    def precompute(self, texts: Iterable[str]) -> list[str]:
        return [self.put(t) for t in texts]

    def get(self, h: str) -> ChunkKV:
        if not is_content_hash(h):
            raise ChunkNotFound(h)
        with self._lock:
            if h in self._mem:
                self._mem.move_to_end(h)
                return self._mem[h]
            try:
                chunk = self._read_disk(h)
                self._remember(h, chunk)
                return chunk
            except ChunkNotFound:
                pass
        with self._computing(h):
            chunk = self._adopt(h)
            self._keep(h, chunk)
        return chunk

    @contextmanager
    def _computing(self, h: str):
        """Around computing a chunk's KV *outside* the lock (the engine's scheduler may pause the
        computation between layers while other requests read the store): a ``delete`` of ``h``
        meanwhile makes :meth:`_keep` drop the result, so an erased chunk never comes back."""
        with self._lock:
            self._busy[h] = self._busy.get(h, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._busy[h] -= 1
                if not self._busy[h]:
                    del self._busy[h]
                    self._erased.discard(h)

    def _keep(self, h: str, chunk: ChunkKV) -> None:
        """Store a KV just computed, unless the chunk was deleted meanwhile or is stored already."""
        with self._lock:
            if h in self._erased:
                return
            if self.has(h):
                self._touch(h)
                return
            self._write_disk(h, chunk)
            self._remember(h, chunk)

    def _adopt(self, h: str) -> ChunkKV:
        """The chunk's KV recomputed from the token ids that another KV configuration of the same
        checkpoint stored (chunks computed alone before anchoring, another dtype): after an upgrade
        the tier still serves every chunk a handoff names, without the text (a handoff sends only
        hashes). The old file stays for the configuration that wrote it; erasure removes both."""
        model = self.encoder.model_id
        for path in sorted(self._copies(h)):
            folder = path.parent.parent.name
            if folder == self.kv_id or not (
                folder.startswith(f"{model}-") and _SAME_CHECKPOINT.fullmatch(folder[len(model) + 1 :])
            ):
                continue  # this configuration's own folder, or another checkpoint (whose name may extend this one's)
            try:
                with safe_open(str(path), framework="pt") as f:
                    meta = f.metadata() or {}
                    ids = f.get_tensor("token_ids")
            except Exception:
                continue
            if meta.get("format") != FORMAT or meta.get("content_hash") != h or ids.dim() != 1 or not ids.numel():
                continue
            return ChunkKV(token_ids=ids, kv=self.encoder.chunk_kv(ids))  # stored by the caller (_keep)
        raise ChunkNotFound(h)

    def _copies(self, h: str) -> list[Path]:
        """The chunk's files under every ``kv_id`` folder of the root (this store's own included)."""
        return list(Path(self.config.root).glob(f"*/{h[:2]}/{h}.safetensors"))

    def has(self, h: str) -> bool:
        with self._lock:
            return h in self._mem or (is_content_hash(h) and self._path(h).exists())

    def delete(self, h: str) -> bool:
        """Remove from both tiers, and the chunk's file under every other ``kv_id`` folder of the
        root (KV an earlier dtype, system prompt or anchoring computed: erasure must reach it
        although this engine would never read it); True if anything was there."""
        if not is_content_hash(h):
            return False
        with self._lock:
            if h in self._busy:
                self._erased.add(h)  # a computation under way must not store it afterwards
            found = False
            chunk = self._mem.pop(h, None)
            if chunk is not None:
                self._mem_bytes -= chunk.nbytes
                found = True
            size = self._disk.pop(h, None)
            if size is not None:
                self._disk_bytes -= size
            for path in self._copies(h):  # this kv_id's file among them
                try:
                    path.unlink()
                    found = True
                except FileNotFoundError:
                    pass
            return found

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "mem_items": len(self._mem),
                "mem_bytes": self._mem_bytes,
                "disk_items": len(self._disk),
                "disk_bytes": self._disk_bytes,
            }

    def in_memory(self, h: str) -> bool:
        with self._lock:
            return h in self._mem

    # ---- RAM tier -------------------------------------------------------------------------------
    def _remember(self, h: str, chunk: ChunkKV) -> None:
        if chunk.nbytes > self.config.mem_bytes:
            return
        self._mem[h] = chunk
        self._mem_bytes += chunk.nbytes
        while self._mem_bytes > self.config.mem_bytes:
            _, old = self._mem.popitem(last=False)
            self._mem_bytes -= old.nbytes

    # ---- disk tier ------------------------------------------------------------------------------
    def _path(self, h: str) -> Path:
        return self.dir / h[:2] / f"{h}.safetensors"

    def _scan_disk(self) -> None:
        files = []
        for f in self.dir.glob("*/*.safetensors"):
            try:
                st = f.stat()
            except FileNotFoundError:
                continue
            files.append((st.st_mtime, f.stem, st.st_size))
        for _, h, size in sorted(files):
            self._disk[h] = size
            self._disk_bytes += size

    def _write_disk(self, h: str, chunk: ChunkKV) -> None:
        assert chunk.kv is not None
        if chunk.nbytes > self.config.disk_bytes:
            return
        path = self._path(h)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{h}.{os.getpid()}.{threading.get_ident()}.tmp")
        meta = {"format": FORMAT, "version": VERSION, "kv_id": self.kv_id, "content_hash": h}
        save_file({"kv": chunk.kv.contiguous(), "token_ids": chunk.token_ids.contiguous()}, str(tmp), metadata=meta)
        os.replace(tmp, path)
        self._index_disk(h, path)
        self._evict_disk()

    def _touch(self, h: str) -> None:
        """Make a stored chunk the most recently used without reading it. Without this, putting
        chunks that were already there left them as old as they were: the same precompute's new
        chunks could evict them, and the `get` that follows a precompute failed (ChunkNotFound)."""
        if h in self._mem:
            self._mem.move_to_end(h)
        path = self._path(h)
        try:
            os.utime(path)
            self._index_disk(h, path)
        except FileNotFoundError:
            pass

    def _index_disk(self, h: str, path: Path) -> None:
        """Account the file at `path` as chunk `h`, the most recent of the disk tier."""
        size = path.stat().st_size
        self._disk_bytes += size - self._disk.pop(h, 0)
        self._disk[h] = size

    def _evict_disk(self) -> None:
        while self._disk_bytes > self.config.disk_bytes and len(self._disk) > 1:
            old, size = self._disk.popitem(last=False)
            self._disk_bytes -= size
            self._path(old).unlink(missing_ok=True)

    def _read_disk(self, h: str) -> ChunkKV:
        path = self._path(h)
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                kv, ids = f.get_tensor("kv"), f.get_tensor("token_ids")
        except FileNotFoundError:
            self._disk_bytes -= self._disk.pop(h, 0)
            raise ChunkNotFound(h) from None
        if meta.get("format") != FORMAT or meta.get("kv_id", meta.get("model_id")) != self.kv_id or meta.get("content_hash") != h:
            raise ChunkNotFound(f"{h}: stored file does not match (format/model/hash): {meta}")
        os.utime(path)  # disk-tier recency
        self._index_disk(h, path)
        return ChunkKV(token_ids=ids, kv=kv)


# ---- hook for the bootstrap pipeline ----------------------------------------------------------
_default_store: ChunkStore | None = None
_default_lock = threading.Lock()


def default_store() -> ChunkStore:
    """The process-wide store, built on first use from MEMSCALE_INFERENCE_MODEL / MEMSCALE_DATA_DIR."""
    global _default_store
    with _default_lock:
        if _default_store is None:
            from app.inference.engine import Engine, config_from_env

            engine = Engine.load(config_from_env())
            root = Path(os.environ.get("MEMSCALE_DATA_DIR", "./.memscale")) / "kv"
            _default_store = ChunkStore(engine, StoreConfig(root=root))
        return _default_store


def precompute_chunks(texts: Iterable[str], store: ChunkStore | None = None) -> list[str]:
    """Compute and store the KV of each text (if absent); return the content hashes, in order.

    Called by the bootstrap pipeline after it splits knowledge assets into chunks. Without a
    ``store``, loads the model once per process (see :func:`default_store`).
    """
    return (store or default_store()).precompute(texts)
