"""The models a process builds once and hands to whatever needs them: the embedders (one per
model id, the configured one first) and the LLM gateway. The API builds one in its lifespan
(`app.state.resources`, around the embedders it already holds), a worker one per process
(app/jobs/runner.py); both load lazily, so a process that never summarises never loads the LLM."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.config import Settings


@dataclass
class Resources:
    """Models built once per process (lazily: a bootstrap-only worker never loads the LLM)."""

    settings: Settings
    _embedder: Any = None
    _gateway: Any = None
    extra: dict = field(default_factory=dict)
    _embedders: Any = None

    @property
    def embedders(self):
        """One embedder per model id (app/embedders/pool.py), the configured one being `embedder`."""
        if self._embedders is None:
            from app.embedders.pool import Embedders

            self._embedders = Embedders(self.settings, self._embedder)  # a process that re-embeds only loads its model
        return self._embedders

    def embedder_for(self, db, org_id):
        """The embedder of the model the org's vectors hold now (its old one while a re-embedding
        runs), under the org's embedder lock in share mode for the caller's transaction."""
        return self.embedders.for_org(db, org_id)

    @property
    def embedder(self):
        """The configured model's embedder."""
        if self._embedder is None:
            self._embedder = self.embedders.get()
        return self._embedder

    @property
    def gateway(self):
        if self._gateway is None:
            from app.llm.gateway import Gateway

            self._gateway = Gateway(
                self.settings.llm_model,
                data_dir=self.settings.data_dir,
                timeout_s=self.settings.llm_timeout_s,
                max_retries=self.settings.llm_max_retries,
            )
        return self._gateway
