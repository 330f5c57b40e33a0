"""The embeddings of one write, made in a thread of their own while the request stores what is done.

A write embeds its new vocabulary and then its items, slice by slice through the fair write lane
(app/kit/runtime/fairness.py `write_slices`); the request's thread takes the pieces in the order they are
done and writes each in its transaction while the model embeds the next: the database's work hides
behind the model's instead of following it. Nothing is committed before the last piece is stored
(the request owns one transaction), so a batch stays all or nothing; an error of the embedding
(a full queue's 429, a failing model) is raised in the request's thread, where the transaction
rolls back.

Up to `PIPELINED` writes per process store while they embed: such a write holds its pooled
connection from its first slice on, also while other tenants' slices go first. Past that, a write
waits for all its embeddings with no connection held (`released`) and then stores them: under a
crowd of writers the model is never idle anyway, one writer's storage overlapping another's slices.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from app.kit.stages import carried, stage

PIPELINED = 2
_GATE = threading.BoundedSemaphore(PIPELINED)


class _Embedding:
    """What an embedding thread shares with the thread that writes: a condition, whether the thread
    has finished, the error it ended with (raised in the writer's thread, where the transaction
    rolls back) and a stop flag."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._finished, self._stop = False, threading.Event()
        self._error: BaseException | None = None

    def _start(self, args: tuple, name: str) -> threading.Thread:
        """The subclass's `_run(*args)` in a daemon thread carrying the caller's stage timer."""
        thread = threading.Thread(target=carried(self._run), args=args, daemon=True, name=name)
        thread.start()
        return thread

    @contextmanager
    def _ending(self):
        """Around the thread's work: its error is kept for the writer; its end is signalled either way."""
        try:
            yield
        except BaseException as exc:
            with self._cv:
                self._error = exc
        finally:
            with self._cv:
                self._finished = True
                self._cv.notify_all()


def item_slices(embedder, who: str | None, texts: list[str], chunk: int | None = None) -> Iterator[tuple[list[int], np.ndarray]]:
    """(indices, vectors) of `texts`: the fair lane's slices when `who` and the embedder has one,
    else chunks of `chunk` texts, longest first (one call when None)."""
    if who is not None and hasattr(embedder, "write_slices"):
        yield from embedder.write_slices(who, texts)
        return
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    step = chunk or max(1, len(texts))
    for start in range(0, len(order), step):
        idx = order[start : start + step]
        yield idx, embedder.embed([texts[i] for i in idx])


class Feed(_Embedding):
    """Pieces ("words", embedded vocabulary) and ("items", (indices, vectors)) per slice, in the
    order they are made (the vocabulary first unless it is given later)."""

    def __init__(
        self,
        embedder,
        who: str | None,
        texts: list[str],
        words: list,
        embed_words: Callable[[list], list],
        *,
        chunk: int | None = None,
        words_after: int = 0,
    ):
        """`words` None: given later (`give_words`), embedded after `words_after` slices of
        items, so that looking them up overlaps the model's first slice (the bulk import)."""
        super().__init__()
        self._words = words
        self._words_after = words_after
        self._pieces: list[tuple[str, object]] = []
        self._items = 0
        self._words_done = False
        self.pipelined = _GATE.acquire(blocking=False)
        self._start((embedder, who, texts, embed_words, chunk), "memscale-ingest")

    def _run(self, embedder, who, texts, embed_words, chunk) -> None:
        with self._ending():
            if self._words is not None:
                self._embed_words(embed_words)
            with stage("embed", scope=True):
                slices = item_slices(embedder, who, texts, chunk)
                try:
                    for n, piece in enumerate(slices, 1):
                        self._put("items", piece)
                        if self._stop.is_set():
                            break
                        if n == self._words_after and not self._words_done:
                            self._embed_words(embed_words)
                            if self._stop.is_set():
                                break
                finally:
                    slices.close()  # releases the fair lane's count of what was not embedded
            if not self._words_done and not self._stop.is_set():
                self._embed_words(embed_words)

    def _embed_words(self, embed_words) -> None:
        with self._cv:
            self._cv.wait_for(lambda: self._words is not None or self._stop.is_set())
        if self._stop.is_set() and self._words is None:
            return
        with stage("vocabulary.embed", scope=True):
            self._put("words", embed_words(self._words) if self._words else [])
        self._words_done = True

    def give_words(self, words: list) -> None:
        """The vocabulary of a Feed made with `words=None`."""
        with self._cv:
            self._words = words
            self._cv.notify_all()

    def _put(self, kind: str, value: object) -> None:
        with self._cv:
            self._pieces.append((kind, value))
            self._items += kind == "items"
            self._cv.notify_all()

    def ready(self) -> None:
        """Wait until the first slice of items is embedded (pipelined) or all are (not): called
        with no pooled connection held. Raises the embedding's error, if any."""
        with stage("embed.wait"), self._cv:
            self._cv.wait_for(lambda: self._finished or (self.pipelined and self._items > 0))
            if self._error is not None:
                raise self._error

    def __iter__(self) -> Iterator[tuple[str, object]]:
        at = 0
        while True:
            with stage("embed.wait"), self._cv:
                self._cv.wait_for(lambda at=at: self._finished or len(self._pieces) > at)
                if len(self._pieces) > at:
                    piece = self._pieces[at]
                elif self._error is not None:
                    raise self._error
                else:
                    return
            at += 1
            yield piece

    def close(self) -> None:
        """Stop embedding (after the slice in progress) and free the pipeline's place."""
        self._stop.set()
        with self._cv:
            self._cv.notify_all()  # a thread waiting for its vocabulary stops
        if self.pipelined:
            self.pipelined = False
            _GATE.release()


AHEAD_CHUNK = 256  # texts per embedding call of `Ahead`


def groups(lists: list[list[str] | None], size: int) -> list[list[int]]:
    """Consecutive indices of `lists` (None: not embedded) in groups of about `size` texts."""
    out: list[list[int]] = []
    cur: list[int] = []
    n = 0
    for i, texts in enumerate(lists):
        if texts is None:
            continue
        cur.append(i)
        n += len(texts)
        if n >= size:
            out.append(cur)
            cur, n = [], 0
    if cur:
        out.append(cur)
    return out


class Ahead(_Embedding):
    """Vectors of lists of texts (a document's chunks), list by list in order, made by a thread
    of their own while the caller writes the lists already done: consecutive lists share calls of
    about `size` texts, longest first within a call (one length pads little), and a None list is
    not embedded. The model is used by one thread at a time: `embed` (texts the look-ahead did not
    embed) takes the same lock as the thread's calls."""

    def __init__(self, embed: Callable[[list[str]], list], lists: list[list[str] | None], *, size: int | None = None):
        super().__init__()
        self._embed_fn, self._lists = embed, lists
        self._lock = threading.Lock()
        self._done: dict[int, list] = {}
        self._thread = self._start((groups(lists, size or AHEAD_CHUNK),), "memscale-ahead")

    def embed(self, texts: list[str]) -> list:
        with self._lock:
            return list(self._embed_fn(texts)) if texts else []

    def _run(self, plan: list[list[int]]) -> None:
        with self._ending():
            with stage("embed", scope=True):
                for docs in plan:
                    if self._stop.is_set():
                        break
                    texts = [(d, k, t) for d in docs for k, t in enumerate(self._lists[d])]
                    texts.sort(key=lambda x: -len(x[2]))
                    vecs = self.embed([t for _, _, t in texts])
                    got = {d: [None] * len(self._lists[d]) for d in docs}
                    for (d, k, _), v in zip(texts, vecs):
                        got[d][k] = v
                    with self._cv:
                        self._done.update(got)
                        self._cv.notify_all()

    def vectors(self, i: int) -> list | None:
        """Document i's vectors, once embedded (None: it was not to be embedded); raises the
        embedding's error in the job's thread, where the transaction rolls back."""
        with stage("embed.wait"), self._cv:
            self._cv.wait_for(lambda: i in self._done or self._finished)
            if i in self._done:
                return self._done.pop(i)
            if self._error is not None:
                raise self._error
            return None

    def close(self) -> None:
        """Stop after the call in progress and wait for the thread (the model is then free)."""
        self._stop.set()
        self._thread.join()
