"""litellm adapter for the local model: ``litellm.completion(model="local/smollm2", ...)``.

Imported only through :func:`load_litellm` / :func:`register_local_provider`, which make sure
``LITELLM_LOCAL_MODEL_COST_MAP`` is set before litellm is first imported (otherwise the import
reaches for the network).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LOCAL_PROVIDER = "local"


def is_local(model: str) -> bool:
    """Whether a litellm model string names the bundled model served in-process (``local/...``)."""
    return model.split("/", 1)[0] == LOCAL_PROVIDER


_REGISTER_LOCK = threading.Lock()
_handler: Any = None


def load_litellm() -> Any:
    """Import litellm with the offline cost map (idempotent)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def _make_handler_class(litellm: Any) -> type:
    from litellm.llms.custom_llm import CustomLLM, CustomLLMError

    from app.llm.local import LOCAL_MODEL_NAMES, LocalModelError, get_local_model

    class LocalProvider(CustomLLM):
        """Serves ``local/smollm2`` from SmolLM2-135M-Instruct under ``data_dir``."""

        def __init__(self, data_dir: Path):
            super().__init__()
            self.data_dir = data_dir

        # litellm calls a custom provider with keyword arguments only.
        def completion(
            self,
            *,
            model: str,
            messages: list,
            api_base: str,
            custom_prompt_dict: dict,
            model_response: Any,
            print_verbose: Any,
            encoding: Any,
            api_key: Any,
            logging_obj: Any,
            optional_params: dict,
            acompletion: Any = None,
            litellm_params: Any = None,
            logger_fn: Any = None,
            headers: Any = None,
            timeout: Any = None,
            client: Any = None,
        ) -> Any:
            name = model.split("/", 1)[-1].lower()
            if name not in LOCAL_MODEL_NAMES:
                raise CustomLLMError(status_code=404, message=f"unknown local model {model!r}")
            if optional_params.get("stream"):
                raise CustomLLMError(status_code=400, message="the local provider does not stream")
            msgs = []
            for m in messages:
                content = m.get("content") or ""
                if isinstance(content, list):
                    content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
                msgs.append({"role": m["role"], "content": str(content)})
            stop = optional_params.get("stop")
            if isinstance(stop, str):
                stop = [stop]
            timeout_s = _timeout_seconds(timeout)
            try:
                gen = get_local_model(self.data_dir).generate(
                    msgs,
                    max_tokens=int(optional_params.get("max_tokens") or optional_params.get("max_completion_tokens") or 256),
                    temperature=float(optional_params.get("temperature") or 0.0),
                    top_p=float(optional_params.get("top_p") or 1.0),
                    stop=stop,
                    timeout_s=timeout_s,
                )
            except LocalModelError as exc:
                raise CustomLLMError(status_code=exc.status_code, message=str(exc)) from exc
            model_response.choices[0].message.content = gen.text
            model_response.choices[0].finish_reason = gen.finish_reason
            model_response.model = f"{LOCAL_PROVIDER}/{name}"
            model_response.id = f"local-{uuid.uuid4().hex[:16]}"
            model_response.created = int(time.time())
            model_response.usage = litellm.Usage(
                prompt_tokens=gen.prompt_tokens,
                completion_tokens=gen.completion_tokens,
                total_tokens=gen.prompt_tokens + gen.completion_tokens,
            )
            return model_response

        async def acompletion(self, *args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(self.completion, *args, **kwargs)

    return LocalProvider


def _timeout_seconds(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, (int, float)):
        return float(timeout)
    read = getattr(timeout, "read", None)  # httpx.Timeout
    return float(read) if read is not None else None


def register_local_provider(data_dir: str | Path) -> Any:
    """Register (once per process) the ``local`` provider with litellm; return litellm."""
    global _handler
    litellm = load_litellm()
    key = Path(data_dir).resolve()
    with _REGISTER_LOCK:
        if _handler is None:
            _handler = _make_handler_class(litellm)(key)
        elif _handler.data_dir != key:
            log.warning("local provider moves from %s to %s", _handler.data_dir, key)
            _handler.data_dir = key
        entries = [e for e in litellm.custom_provider_map if e.get("provider") != LOCAL_PROVIDER]
        litellm.custom_provider_map = entries + [{"provider": LOCAL_PROVIDER, "custom_handler": _handler}]
    return litellm
