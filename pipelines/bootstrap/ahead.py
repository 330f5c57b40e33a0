"""Bootstrap's documents embedded ahead of their writes: a thread embeds the chunks of the next
documents while the job's thread writes the previous one (each document stays one transaction
with the job's checkpoint). One embedding pass: consecutive documents' chunks share calls of about
`EMBED_CHUNK` texts, longest first within a call (one length pads little), and every chunk is
embedded once. Documents whose content the org already holds unchanged are not embedded (the
write finds them unchanged and skips them, as before).

The model is used by one thread at a time: `embed` (a document that changed after the look-ahead
read it, written inline) takes the same lock as the thread's calls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from app.kit.stages import carried, stage
from app.knowledge import service as knowledge
from pipelines.bootstrap.sources import chunk_text

EMBED_CHUNK = 256  # texts per embedding call


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


class Ahead:
    """Vectors per document index, made in order by a thread of their own."""

    def __init__(self, embed: Callable[[list[str]], list], lists: list[list[str] | None], *, size: int | None = None):
        self._embed_fn, self._lists = embed, lists
        self._lock, self._cv = threading.Lock(), threading.Condition()
        self._done: dict[int, list] = {}
        self._error: BaseException | None = None
        self._finished, self._stop = False, threading.Event()
        self._thread = threading.Thread(
            target=carried(self._run), args=(groups(lists, size or EMBED_CHUNK),), daemon=True, name="bootstrap-embed"
        )
        self._thread.start()

    def embed(self, texts: list[str]) -> list:
        with self._lock:
            return list(self._embed_fn(texts)) if texts else []

    def _run(self, plan: list[list[int]]) -> None:
        try:
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
        except BaseException as exc:
            with self._cv:
                self._error = exc
        finally:
            with self._cv:
                self._finished = True
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


class Documents:
    """The job's documents chunked and counted once, up front, and embedded ahead of their writes
    (pipelines/bootstrap/ahead.py) from the first document on (the glossary, written first, has
    the model to itself)."""

    def __init__(self, ctx, work: list, count):
        self._ctx = ctx
        self._chunks = {i: chunk_text(d.text, count) for i, (w, d) in enumerate(work) if w == "doc"}
        self._counts = {i: [count(t) for t in c] for i, c in self._chunks.items()}
        with ctx.tx() as db:
            same = knowledge.unchanged_uris(db, ctx.org_id, [(d.uri, d.content_hash) for w, d in work if w == "doc"])
        self._lists = [self._chunks[i] if w == "doc" and d.uri not in same else None for i, (w, d) in enumerate(work)]
        self._ahead: Ahead | None = None
        self._closed = False

    def _started(self) -> Ahead | None:
        if self._ahead is None and not self._closed:
            self._ahead = Ahead(self._ctx.resources.embedder.embed, self._lists)
        return self._ahead

    def chunks(self, i: int) -> list[str]:
        return self._chunks[i]

    def counts(self, i: int) -> list[int]:
        return self._counts[i]

    def vectors(self, i: int) -> list | None:
        a = self._started()
        return a.vectors(i) if a is not None else None

    def embedder(self):
        """What embeds a document the look-ahead did not (it changed since): the same lock."""
        return self._started() or self._ctx.resources.embedder

    def close(self) -> None:
        self._closed = True
        if self._ahead is not None:
            self._ahead.close()
