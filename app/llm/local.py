"""SmolLM2-135M-Instruct in this process, via transformers (the offline default chat model).

Design choices:
- One model per process and model directory, loaded lazily on the first generation under a lock
  (the tokenizer alone loads for token counting, without the weights), with the project's one
  loader and decode loop (``app.kit.runtime.localmodel``: the inference tier and cartridge training use
  the same two).
- Generations are serialised by a lock: two threads on 2 CPU cores would only slow each other.
  Waiting for the lock counts against the call's timeout.
- Greedy decoding at temperature 0 (deterministic); sampling only when a caller asks for more.
- The chat template from the tokenizer is applied; a prompt that does not fit the context window
  (minus the requested completion) is refused, never silently cut.
- ``timeout_s`` bounds the whole call: decoding stops at the deadline and the partial text is
  returned with finish_reason ``"length"``.

Nothing here imports litellm; :mod:`app.llm.provider` adapts this to litellm's CustomLLM.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.kit.runtime.localmodel import decode, load_causal_lm, load_tokenizer, local_model_dir, stop_token_ids

log = logging.getLogger(__name__)

LOCAL_MODEL_NAMES = frozenset({"smollm2", "smollm2-135m-instruct", "smollm2-135m"})


class LocalModelError(Exception):
    def __init__(self, message: str, status_code: int = 500):
        super().__init__(message)
        self.status_code = status_code


@dataclass(frozen=True)
class LocalGeneration:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" | "length"


class LocalChatModel:
    def __init__(self, path: Path):
        self.path = path
        self._load_lock = threading.Lock()
        self._gen_lock = threading.Lock()
        self._tokenizer: Any = None
        self._model: Any = None
        self._stops: set[int] = set()

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            with self._load_lock:
                if self._tokenizer is None:
                    self._tokenizer = load_tokenizer(self.path)
        return self._tokenizer

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> Any:
        tokenizer = self.tokenizer
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    started = time.perf_counter()
                    model, _ = load_causal_lm(self.path)
                    self._stops = stop_token_ids(model, tokenizer)
                    self._model = model
                    log.info("local model loaded from %s in %.2fs", self.path, time.perf_counter() - started)
        assert tokenizer is not None
        return self._model

    @property
    def context_window(self) -> int:
        config = self.load().config
        return int(getattr(config, "max_position_embeddings", 2048))

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def count_tokens_many(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

    def render(self, messages: list[dict[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def generate(
        self,
        messages: list[dict[str, str]],
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: list[str] | None = None,
        timeout_s: float | None = None,
    ) -> LocalGeneration:
        from transformers import DynamicCache

        started = time.monotonic()
        model = self.load()
        tok = self.tokenizer
        ids = tok(self.render(messages), add_special_tokens=False)["input_ids"]
        n_prompt = len(ids)
        max_tokens = max(1, int(max_tokens))
        if n_prompt + max_tokens > self.context_window:
            raise LocalModelError(
                f"prompt of {n_prompt} tokens + {max_tokens} new exceeds the local model's "
                f"context window of {self.context_window}",
                status_code=400,
            )
        wait = None if timeout_s is None else max(0.0, timeout_s - (time.monotonic() - started))
        if not self._gen_lock.acquire(timeout=-1 if wait is None else wait):
            raise LocalModelError("timed out waiting for the local model", status_code=408)
        try:
            deadline = None
            if timeout_s is not None:
                deadline = started + timeout_s
                if time.monotonic() >= deadline:
                    raise LocalModelError("timed out before generation started", status_code=408)
            sampled = bool(temperature and temperature > 0)
            (out,) = decode(
                model,
                DynamicCache(),
                [ids],
                start=0,
                max_new_tokens=max_tokens,
                stop_ids=self._stops,
                temperature=float(temperature) if sampled else 0.0,
                top_p=float(top_p) if sampled else 1.0,
                deadline=deadline,
            )
        finally:
            self._gen_lock.release()
        text = tok.decode(out.tokens, skip_special_tokens=True)
        finish = "stop" if out.stopped else "length"
        for s in stop or []:
            cut = text.find(s)
            if s and cut >= 0:
                text, finish = text[:cut], "stop"
        return LocalGeneration(text=text.strip(), prompt_tokens=n_prompt, completion_tokens=len(out.tokens), finish_reason=finish)


_MODELS: dict[Path, LocalChatModel] = {}
_MODELS_LOCK = threading.Lock()


def get_local_model(data_dir: str | Path) -> LocalChatModel:
    """The process-wide model for ``data_dir`` (converted from the bundled GGUF on first use)."""
    key = Path(data_dir).resolve()
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is None:
            model = LocalChatModel(local_model_dir(key))
            _MODELS[key] = model
        return model
