"""What every gateway offers, and the structured-output logic they share.

``chat`` is provider-specific (litellm in :mod:`app.llm.gateway`, scripted in
:mod:`app.llm.fake`); ``chat_json`` is written once here on top of it so that the fake gateway
exercises exactly the parsing / validation / repair path the real one uses.

``chat_json`` never raises: it returns the validated value, or a :class:`JSONFailure` that the
caller records (a job counts it and moves on).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from app.llm.jsonparse import JSONParseError, parse_json

log = logging.getLogger(__name__)

Message = dict[str, str]
MessagesIn = Sequence[Message | tuple[str, str]]

_REPAIR_RAW_CHARS = 1200


class LLMError(Exception):
    """A chat call failed after its retries (or could not be retried)."""

    def __init__(self, message: str, *, retryable: bool = False, status_code: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code


class LLMTimeout(LLMError):
    def __init__(self, message: str):
        super().__init__(message, retryable=True, status_code=408)


@dataclass(frozen=True)
class JSONFailure:
    """A structured call that produced nothing usable; ``raw`` is the last model output."""

    error: str
    raw: str = ""
    attempts: int = 0

    def __bool__(self) -> bool:  # so `if not result:` reads naturally for failures
        return False


@dataclass
class GatewayStats:
    """Counters a job can copy into its stats; thread-safe increments."""

    calls: int = 0
    retries: int = 0
    errors: int = 0
    json_ok: int = 0
    json_repaired: int = 0
    json_failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


def normalise_messages(messages: MessagesIn) -> list[Message]:
    """Accept OpenAI-style dicts or (role, content) pairs; content lists are joined as text."""
    out: list[Message] = []
    for m in messages:
        if isinstance(m, tuple):
            role, content = m
        else:
            role, content = m["role"], m.get("content") or ""
        if isinstance(content, list):  # OpenAI content parts
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        if role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"unknown message role {role!r}")
        out.append({"role": role, "content": str(content)})
    if not out:
        raise ValueError("messages must not be empty")
    return out


def schema_hint_for(schema: Any) -> str:
    """A compact example of the expected JSON shape, readable by a small model."""
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        props = schema.model_json_schema().get("properties", {})
        parts = []
        for name, spec in props.items():
            kind = spec.get("type") or "value"
            parts.append(f'"{name}": {kind}')
        return "{" + ", ".join(parts) + "}"
    if get_origin(schema) is list and getattr(schema, "__args__", None):
        return "[" + schema_hint_for(schema.__args__[0]) + ", ...]"
    return "JSON"


def _coerce_shape(value: Any, schema: Any) -> Any:
    """Forgive the commonest shape slips: {"items": [...]} for a list, [obj] for an object."""
    if schema is None:
        return value
    wants_list = get_origin(schema) is list
    if wants_list and isinstance(value, dict):
        lists = [v for v in value.values() if isinstance(v, list)]
        return lists[0] if len(value) == 1 and lists else [value]
    wants_model = isinstance(schema, type) and issubclass(schema, BaseModel)
    if wants_model and isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        return value[0]
    return value


def _validation_summary(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "value"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


class BaseGateway(ABC):
    """The interface pipelines and services use; see :class:`app.llm.gateway.Gateway`."""

    model: str
    stats: GatewayStats

    @abstractmethod
    def chat(self, messages: MessagesIn, max_tokens: int = 256, temperature: float = 0.0) -> str:
        """Return the assistant's text; raise :class:`LLMError` after retries."""

    @abstractmethod
    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the configured model's tokenizer."""

    def count_tokens_many(self, texts: list[str]) -> list[int]:
        """`count_tokens` of each text; a gateway whose tokenizer batches overrides it."""
        return [self.count_tokens(t) for t in texts]

    def parse_and_validate(self, raw: str, schema: Any = None) -> Any:
        """Parse model output and validate it; raise ValueError with a short reason."""
        value = parse_json(raw)
        if schema is None:
            return value
        try:
            return TypeAdapter(schema).validate_python(_coerce_shape(value, schema))
        except ValidationError as exc:
            raise ValueError(f"wrong shape ({_validation_summary(exc)})") from exc

    def chat_json(
        self,
        messages: MessagesIn,
        schema: Any = None,
        *,
        schema_hint: str | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        repair: bool = True,
    ) -> Any:
        """Ask for JSON; return the parsed (and, with ``schema``, validated) value or a JSONFailure.

        ``schema`` is anything pydantic's TypeAdapter accepts (a model class, ``list[Model]``, ...).
        On a parse/validation failure the model is asked once to repair its answer.
        """
        msgs = normalise_messages(messages)
        hint = schema_hint or schema_hint_for(schema)
        attempts = 0
        raw = ""
        error = ""
        for attempt in range(2 if repair else 1):
            if attempt == 1:
                msgs = msgs + [
                    {"role": "assistant", "content": raw[:_REPAIR_RAW_CHARS]},
                    {"role": "user", "content": repair_prompt(error, hint)},
                ]
            attempts += 1
            try:
                raw = self.chat(msgs, max_tokens=max_tokens, temperature=temperature)
            except LLMError as exc:
                self.stats.add(json_failures=1)
                log.warning("chat_json: LLM call failed: %s", exc)
                return JSONFailure(error=f"llm error: {exc}", raw=raw, attempts=attempts)
            try:
                value = self.parse_and_validate(raw, schema)
            except (JSONParseError, ValueError) as exc:
                error = str(exc)
                continue
            self.stats.add(json_ok=1, json_repaired=attempt)
            return value
        self.stats.add(json_failures=1)
        log.info("chat_json: unusable output after %d attempt(s): %s", attempts, error)
        return JSONFailure(error=error, raw=raw, attempts=attempts)

    async def achat(self, messages: MessagesIn, max_tokens: int = 256, temperature: float = 0.0) -> str:
        """``chat`` off the event loop (the local model and litellm's sync path block)."""
        return await asyncio.to_thread(self.chat, messages, max_tokens, temperature)

    async def achat_json(self, messages: MessagesIn, schema: Any = None, **kwargs: Any) -> Any:
        return await asyncio.to_thread(lambda: self.chat_json(messages, schema, **kwargs))


def repair_prompt(error: str, hint: str) -> str:
    return f"Your answer could not be used: {error}. Reply again with only valid JSON of this shape: {hint}. No other text."
