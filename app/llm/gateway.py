"""The LLM gateway: every chat call of the service and the pipelines goes through here.

``Gateway(model, data_dir, timeout_s, max_retries)`` is built once at start-up (API lifespan,
worker boot) and passed down. ``model`` is any litellm model string (``openai/gpt-4o-mini``,
``anthropic/...``, ``ollama/...``; keys from the provider's usual environment variables) or
``local/smollm2``, the offline default served in-process by :mod:`app.llm.local`.

Design choices:
- litellm is imported on first use, never at module import (its import costs seconds and must
  see ``LITELLM_LOCAL_MODEL_COST_MAP=True`` first, or it reaches for the network).
- Every call has a wall-clock timeout (passed to the provider *and* enforced here by waiting on a
  daemon thread, so a provider that ignores timeouts cannot hang a job) and up to
  ``max_retries`` retries with exponential backoff for transient failures (timeouts, connection
  errors, 408/409/429/5xx). Client errors (400/401/403/404, context too long) are not retried.
- One OpenTelemetry span per call (``llm.chat``) when opentelemetry is installed; with no SDK
  configured the tracer is a no-op. No exporter is set up here.
- ``count_tokens`` uses the configured model's tokenizer: SmolLM2's for ``local/*`` (tokenizer
  only, the weights are not loaded for counting), ``litellm.token_counter`` otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any

from app.llm.base import BaseGateway, GatewayStats, LLMError, LLMTimeout, MessagesIn, normalise_messages
from app.llm.provider import is_local as _is_local

log = logging.getLogger(__name__)

DEFAULT_MODEL = "local/smollm2"
_RETRYABLE_STATUS = {408, 409, 425, 429}
_RETRYABLE_NAMES = {
    "Timeout",
    "APITimeoutError",
    "APIConnectionError",
    "ServiceUnavailableError",
    "InternalServerError",
    "RateLimitError",
    "TimeoutError",
    "ConnectionError",
}


def _tracer() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:  # telemetry is optional
        return None
    return trace.get_tracer(__name__)


def classify_error(exc: BaseException) -> LLMError:
    """Map a provider/litellm exception to an LLMError that knows whether to retry."""
    if isinstance(exc, LLMError):
        return exc
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    names = {cls.__name__ for cls in type(exc).__mro__}
    if status is not None:
        retryable = status in _RETRYABLE_STATUS or status >= 500
    else:
        retryable = bool(names & _RETRYABLE_NAMES)
    if "ContextWindowExceededError" in names or "AuthenticationError" in names:
        retryable = False
    message = f"{type(exc).__name__}: {exc}"
    if "Timeout" in names or status == 408:
        return LLMTimeout(message)
    return LLMError(message, retryable=retryable, status_code=status)


class Gateway(BaseGateway):
    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        data_dir: str | Path = ".memscale",
        timeout_s: float = 60.0,
        max_retries: int = 2,
        *,
        backoff_s: float = 0.5,
        grace_s: float = 2.0,
    ):
        if not model or not model.strip():
            raise ValueError("model must be a litellm model string such as 'local/smollm2'")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.model = model
        self.data_dir = Path(data_dir)
        self.timeout_s = float(timeout_s)
        self.max_retries = max(0, int(max_retries))
        self.backoff_s = backoff_s
        self.grace_s = grace_s  # extra wait beyond timeout_s before the call is abandoned
        self.stats = GatewayStats()
        self._litellm: Any = None
        self._init_lock = threading.Lock()
        self._counts: dict[tuple[int, int], int] = {}  # token counts of recent texts, see count_tokens

    @property
    def is_local(self) -> bool:
        return _is_local(self.model)

    def _lib(self) -> Any:
        if self._litellm is None:
            with self._init_lock:
                if self._litellm is None:
                    from app.llm import provider

                    self._litellm = provider.register_local_provider(self.data_dir) if self.is_local else provider.load_litellm()
        return self._litellm

    def warm_up(self) -> None:
        """Import litellm and, for the local model, load the weights (optional, at start-up)."""
        self._lib()
        if self.is_local:
            from app.llm.local import get_local_model

            get_local_model(self.data_dir).load()

    # -- chat -------------------------------------------------------------------------------

    def chat(
        self, messages: MessagesIn, max_tokens: int = 256, temperature: float = 0.0, *, stop: list[str] | None = None
    ) -> str:
        msgs = normalise_messages(messages)
        tracer = _tracer()
        span_cm = tracer.start_as_current_span("llm.chat") if tracer else contextlib.nullcontext()
        with span_cm as span:
            if span is not None:
                span.set_attribute("gen_ai.request.model", self.model)
                span.set_attribute("gen_ai.request.max_tokens", int(max_tokens))
                span.set_attribute("gen_ai.request.temperature", float(temperature))
            last: LLMError | None = None
            for attempt in range(self.max_retries + 1):
                if attempt:
                    self.stats.add(retries=1)
                    time.sleep(min(self.backoff_s * 2 ** (attempt - 1), 8.0))
                self.stats.add(calls=1)
                try:
                    response = self._complete_with_deadline(msgs, max_tokens, temperature, stop)
                except Exception as exc:
                    last = classify_error(exc)
                    log.warning("LLM call %s failed (attempt %d/%d): %s", self.model, attempt + 1, self.max_retries + 1, last)
                    if not last.retryable:
                        break
                    continue
                text = response.choices[0].message.content or ""
                usage = getattr(response, "usage", None)
                prompt_t = int(getattr(usage, "prompt_tokens", 0) or 0)
                completion_t = int(getattr(usage, "completion_tokens", 0) or 0)
                self.stats.add(prompt_tokens=prompt_t, completion_tokens=completion_t)
                if span is not None:
                    span.set_attribute("gen_ai.usage.input_tokens", prompt_t)
                    span.set_attribute("gen_ai.usage.output_tokens", completion_t)
                    span.set_attribute("memscale.llm.attempts", attempt + 1)
                    finish = getattr(response.choices[0], "finish_reason", None)
                    if finish:
                        span.set_attribute("gen_ai.response.finish_reasons", [str(finish)])
                return text
            assert last is not None
            self.stats.add(errors=1)
            raise last  # the span records the exception and an error status on the way out

    def _complete_with_deadline(
        self, msgs: list[dict[str, str]], max_tokens: int, temperature: float, stop: list[str] | None
    ) -> Any:
        litellm = self._lib()
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": msgs,
            "max_tokens": int(max_tokens),
            "temperature": float(temperature),
            "timeout": self.timeout_s,
            "num_retries": 0,  # retries are ours, so they are counted and traced once
            "drop_params": True,  # e.g. models that reject `temperature` still answer
        }
        if stop:
            kwargs["stop"] = stop
        box: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["response"] = litellm.completion(**kwargs)
            except BaseException as exc:
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=run, name="llm-call", daemon=True).start()
        if not done.wait(self.timeout_s + self.grace_s):
            raise LLMTimeout(f"{self.model} gave no answer within {self.timeout_s:.1f}s")
        if "error" in box:
            raise box["error"]
        return box["response"]

    # -- tokens -----------------------------------------------------------------------------

    # Token counts of recently counted texts, keyed by (hash, length): context assembly counts
    # the same conversation turns and memories request after request (a /v1/context at LoCoMo
    # scale spent ~25% of its time in the tokenizer). No text is kept, only its salted in-process
    # hash (Python's, random per process) and its count; cleared when it grows past the bound.
    COUNT_CACHE = 50_000

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        key = (hash(text), len(text))
        n = self._counts.get(key)
        if n is None:
            n = self._count(text)
            self._remember({key: n})
        return n

    def count_tokens_many(self, texts: list[str]) -> list[int]:
        """Many texts at once: the local tokenizer encodes those it has not counted recently in
        one batched call (context assembly counts ~80 pieces per request; one by one that was
        ~8 ms of a /v1/context)."""
        keys = [(hash(t), len(t)) for t in texts]
        known = {k: self._counts.get(k) for k in keys}
        todo = list({k: t for k, t in zip(keys, texts) if known[k] is None and t}.items())
        if todo:
            counted = dict(zip((k for k, _ in todo), self._count_many([t for _, t in todo])))
            known.update(counted)
            self._remember(counted)
        return [known[k] or 0 for k in keys]

    def _remember(self, counts: dict) -> None:
        if len(self._counts) + len(counts) > self.COUNT_CACHE:
            self._counts = {}
        self._counts.update(counts)

    def _count(self, text: str) -> int:
        if self.is_local:
            from app.llm.local import get_local_model

            return get_local_model(self.data_dir).count_tokens(text)
        return int(self._lib().token_counter(model=self.model, text=text))

    def _count_many(self, texts: list[str]) -> list[int]:
        if self.is_local:
            from app.llm.local import get_local_model

            return get_local_model(self.data_dir).count_tokens_many(texts)
        return [self._count(t) for t in texts]
