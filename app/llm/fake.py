"""A scripted gateway for unit tests of prompt plumbing (no litellm, no model).

Same interface as :class:`app.llm.gateway.Gateway` (``chat``, ``chat_json`` with the real
parsing/repair logic, ``count_tokens``, async variants). Answers come from:

- ``rules``: ``(substring, answer)`` pairs matched, in order, against the prompt (all message
  contents joined). The first rule whose substring occurs wins. An answer may be a ``str``,
  an ``Exception`` instance (raised, as a failing provider would), a callable
  ``(messages) -> str``, or a ``list`` of those consumed one per matching call (the last one
  repeats).
- ``script``: answers used in order when no rule matches.
- ``default``: used when neither gives an answer; ``None`` raises :class:`LLMError`.

Every call is recorded in ``calls`` so tests can assert on what the model was shown.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.llm.base import BaseGateway, GatewayStats, LLMError, MessagesIn, normalise_messages

Answer = str | Exception | Callable[[list[dict[str, str]]], str]
_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)


@dataclass(frozen=True)
class FakeCall:
    messages: list[dict[str, str]]
    max_tokens: int
    temperature: float

    @property
    def prompt(self) -> str:
        return "\n".join(m["content"] for m in self.messages)

    @property
    def system(self) -> str:
        return "\n".join(m["content"] for m in self.messages if m["role"] == "system")

    @property
    def last_user(self) -> str:
        users = [m["content"] for m in self.messages if m["role"] == "user"]
        return users[-1] if users else ""


class FakeGateway(BaseGateway):
    def __init__(
        self,
        script: Iterable[Answer] | None = None,
        *,
        rules: Iterable[tuple[str, Answer | list[Answer]]] | dict[str, Answer | list[Answer]] | None = None,
        default: Answer | None = None,
        model: str = "fake/scripted",
    ):
        self.model = model
        self.stats = GatewayStats()
        self.calls: list[FakeCall] = []
        self._script = list(script or [])
        pairs = rules.items() if isinstance(rules, dict) else (rules or [])
        self._rules: list[tuple[str, list[Answer]]] = [
            (needle, list(ans) if isinstance(ans, list) else [ans]) for needle, ans in pairs
        ]
        self._default = default
        self._lock = threading.Lock()

    def _next_answer(self, prompt: str) -> Answer | None:
        with self._lock:
            for needle, answers in self._rules:
                if needle in prompt:
                    return answers.pop(0) if len(answers) > 1 else answers[0]
            if self._script:
                return self._script.pop(0)
            return self._default

    def chat(
        self, messages: MessagesIn, max_tokens: int = 256, temperature: float = 0.0, *, stop: list[str] | None = None
    ) -> str:
        msgs = normalise_messages(messages)
        call = FakeCall(messages=msgs, max_tokens=max_tokens, temperature=temperature)
        with self._lock:
            self.calls.append(call)
        self.stats.add(calls=1)
        answer = self._next_answer(call.prompt)
        if answer is None:
            self.stats.add(errors=1)
            raise LLMError("FakeGateway: no scripted answer for this prompt")
        if isinstance(answer, Exception):
            self.stats.add(errors=1)
            raise answer if isinstance(answer, LLMError) else LLMError(str(answer))
        text = answer(msgs) if callable(answer) else str(answer)
        for s in stop or []:
            if s and s in text:
                text = text[: text.index(s)]
        self.stats.add(prompt_tokens=self.count_tokens(call.prompt), completion_tokens=self.count_tokens(text))
        return text

    def count_tokens(self, text: str) -> int:
        """Words and punctuation marks: deterministic and close enough for budgets in tests."""
        return len(_TOKEN.findall(text or ""))

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
