"""Bootstrap's documents embedded ahead of their writes: a thread embeds the chunks of the next
documents while the job's thread writes the previous one (each document stays one transaction
with the job's checkpoint). One embedding pass: consecutive documents' chunks share calls of about
`EMBED_CHUNK` texts, longest first within a call (one length pads little), and every chunk is
embedded once. Documents whose content the org already holds unchanged are not embedded (the
write finds them unchanged and skips them, as before).

The look-ahead is app/episodes/feed.py's `Ahead` (the bulk import's assets use it too); a document
that changed after the look-ahead read it is embedded inline under the same lock.
"""

from __future__ import annotations

from app.episodes.feed import Ahead
from app.knowledge import service as knowledge
from pipelines.bootstrap.sources import chunk_text

EMBED_CHUNK = 256  # texts per embedding call


class Documents:
    """The job's documents chunked and counted once, up front, and embedded ahead of their writes
    (app/episodes/feed.py `Ahead`) from the first document on (the glossary, written first, has
    the model to itself)."""

    def __init__(self, ctx, work: list, count, embedder):
        self._ctx, self.model_embedder = ctx, embedder  # the org's model when the job started
        self._chunks = {i: chunk_text(d.text, count) for i, (w, d) in enumerate(work) if w == "doc"}
        self._counts = {i: [count(t) for t in c] for i, c in self._chunks.items()}
        with ctx.tx() as db:
            same = knowledge.unchanged_uris(db, ctx.org_id, [(d.uri, d.content_hash) for w, d in work if w == "doc"])
        self._lists = [self._chunks[i] if w == "doc" and d.uri not in same else None for i, (w, d) in enumerate(work)]
        self._ahead: Ahead | None = None
        self._closed = False

    def _started(self) -> Ahead | None:
        if self._ahead is None and not self._closed:
            self._ahead = Ahead(self.model_embedder.embed, self._lists, size=EMBED_CHUNK)
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
        return self._started() or self.model_embedder

    def close(self) -> None:
        self._closed = True
        if self._ahead is not None:
            self._ahead.close()
