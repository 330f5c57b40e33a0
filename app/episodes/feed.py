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

import numpy as np

from app.kit.stages import carried, stage

PIPELINED = 2
_GATE = threading.BoundedSemaphore(PIPELINED)


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


class Feed:
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
        self._cv = threading.Condition()
        self._words = words
        self._words_after = words_after
        self._pieces: list[tuple[str, object]] = []
        self._items = 0
        self._finished, self._error, self._stop = False, None, threading.Event()
        self._words_done = False
        self.pipelined = _GATE.acquire(blocking=False)
        work = carried(self._run)
        threading.Thread(
            target=work, args=(embedder, who, texts, embed_words, chunk), daemon=True, name="memscale-ingest"
        ).start()

    def _run(self, embedder, who, texts, embed_words, chunk) -> None:
        try:
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
        except BaseException as exc:
            with self._cv:
                self._error = exc
        finally:
            with self._cv:
                self._finished = True
                self._cv.notify_all()

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
