"""The embedders one process holds: one per model id, the configured one built at start-up, any
other on first use (an org still on its old model while a re-embedding runs, the model a
re-embedding switches to), each wrapped like the configured one (the fair scheduler in the API)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

from sqlalchemy.orm import Session


class Embedders:
    def __init__(self, settings, default=None, *, wrap: Callable | None = None, current: Callable | None = None):
        """`default`: the configured model's embedder, if already built; `current`: where the
        process keeps it (the API's `app.state.embedder`), read at each use instead."""
        self.settings = settings
        self.configured = settings.embedding_model
        self._wrap = wrap or (lambda e: e)
        self._current = current
        self._by_model: dict[str, object] = {}
        self._lock = threading.Lock()
        if default is not None:
            self._adopt(self.configured, default)

    def _adopt(self, model: str, embedder):
        try:
            embedder.embedders = self  # a writer's check finds the other models through the one it used
        except AttributeError:
            pass
        self._by_model[model] = embedder
        return embedder

    def get(self, model: str | None = None):
        """The embedder of `model` (default: the configured one), built on first use."""
        model = model or self.configured
        if model == self.configured and self._current is not None:
            return self._current()
        with self._lock:
            if model not in self._by_model:
                from app.kit.runtime.embedding import make_embedder

                self._adopt(model, self._wrap(make_embedder(self.settings, model)))
            return self._by_model[model]

    def model_of(self, embedder) -> str:
        """The model id `embedder` embeds with (the pool's key: a test's stand-in counts as the
        configured model)."""
        if self._current is not None and embedder is self._current():
            return self.configured
        for model, e in self._by_model.items():
            if e is embedder:
                return model
        return getattr(embedder, "model", None) or self.configured

    def for_org(self, db: Session, org_id: uuid.UUID):
        """The embedder of the model whose vectors the org's rows hold now (its old model until a
        re-embedding switches it), under the org's embedder lock in share mode: the ranking or
        the write of the caller's transaction compares or stores vectors of that model only."""
        from app.embedders import service

        return self.get(service.serving_model(db, org_id, default=self.configured))
