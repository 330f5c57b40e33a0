"""The models a process builds once and hands to whatever needs them: the embedder and the LLM
gateway. The API builds one in its lifespan (`app.state.resources`, around the embedder it already
holds), a worker one per process (app/jobs/runner.py); both load lazily, so a process that never
summarises never loads the LLM."""

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

    @property
    def embedder(self):
        if self._embedder is None:
            from app.kit.runtime.embedding import make_embedder

            self._embedder = make_embedder(self.settings)
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
