"""Engine: a HuggingFace causal LM with RoPE, and greedy generation from a given KV state.

Design choices:
- Loaded by path (any local Llama/Qwen-family checkpoint); CPU fp32 by default, CUDA bf16 when
  a GPU is present. Nothing is read from the environment here: :func:`config_from_env` is called
  by the CLI (and the precompute hook) at start-up.
- transformers 5.x cache API: ``DynamicCache``, ``model(ids, cache=..., position_ids=...)``,
  ``cache.layers[i].keys``; forward appends to the cache in place.
- A prompt is ``[prefix_kv] + system + chunks + query``: the system segment and the query suffix
  come from the model's chat template (the chunks and the question form the user turn), each
  chunk is tokenized alone as ``text + "\\n\\n"`` (so its stored KV and ids are a function of its
  text), and every segment is tokenized separately, identically in every mode.
- ``prefix_kv`` (cartridges) is a list per layer of (K, V), each (1, kv_heads, p, head_dim),
  positioned at 0..p-1; everything else continues at p.
- Greedy decoding only; the time of the first generated token is recorded for TTFT.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from app.inference.blend import BlendConfig, Mode, build_context
from app.inference.kv import ChunkKV, PrefixKV, check_prefix_kv, rope_inv_freq, stack_kv

log = logging.getLogger(__name__)

DEFAULT_SYSTEM = "You are a helpful assistant. Answer the question using the documents. Be brief."
_PLACEHOLDER = "\u0000MEMSCALE_USER\u0000"


class PromptTooLong(ValueError):
    """The prompt (with max_tokens) does not fit the engine's context limit."""


@dataclass(frozen=True)
class EngineConfig:
    model_path: str
    device: str | None = None  # None: cuda if available, else cpu
    dtype: str | None = None  # None: bfloat16 on cuda, float32 on cpu
    max_context: int = 4096  # prefix + prompt + generated tokens; capped by the model's limit
    threads: int | None = None  # torch intra-op threads (None: torch's default)
    system_prompt: str = DEFAULT_SYSTEM


def config_from_env(environ: dict[str, str] | None = None) -> EngineConfig:
    """MEMSCALE_INFERENCE_MODEL, else the bundled SmolLM2 under MEMSCALE_DATA_DIR (./.memscale)."""
    env = os.environ if environ is None else environ
    path = env.get("MEMSCALE_INFERENCE_MODEL")
    if not path:
        from app.kit.localmodel import local_model_dir

        path = str(local_model_dir(env.get("MEMSCALE_DATA_DIR", "./.memscale")))
    return EngineConfig(model_path=path)


@dataclass
class Generation:
    token_ids: list[int]
    text: str
    prompt_tokens: int  # system + chunks + query (the cartridge prefix not included)
    prefix_tokens: int  # cartridge prefix length p
    recomputed_tokens: int  # chunk tokens computed through every layer
    first_token_at: float  # time.perf_counter() when the first token was chosen
    finished_at: float
    first_logits: torch.Tensor = field(repr=False)  # (vocab,) fp32, logits of the first token


class Engine:
    def __init__(self, config: EngineConfig, model, tokenizer, device: torch.device, dtype: torch.dtype):
        self.config, self.model, self.tokenizer = config, model, tokenizer
        self.device, self.dtype = device, dtype
        cfg = model.config
        self.n_layers: int = cfg.num_hidden_layers
        self.kv_heads: int = cfg.num_key_value_heads
        self.head_dim: int = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.max_context = min(config.max_context, getattr(cfg, "max_position_embeddings", config.max_context))
        self.inv_freq = rope_inv_freq(model)  # (head_dim/2,) fp32
        self.model_id = f"{Path(config.model_path).name}-{str(dtype).removeprefix('torch.')}"
        self.system_ids, self.query_suffix = self._template(config.system_prompt)
        eos = {tokenizer.eos_token_id}
        gen_eos = getattr(model.generation_config, "eos_token_id", None)
        eos |= set(gen_eos) if isinstance(gen_eos, list) else {gen_eos}
        self.eos_ids = {e for e in eos if e is not None}

    @classmethod
    def load(cls, config: EngineConfig) -> Engine:
        if config.threads:
            torch.set_num_threads(config.threads)
        device = torch.device(config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        dtype = getattr(torch, config.dtype) if config.dtype else (
            torch.bfloat16 if device.type == "cuda" else torch.float32
        )
        t0 = time.perf_counter()
        tok = AutoTokenizer.from_pretrained(config.model_path)
        model = AutoModelForCausalLM.from_pretrained(config.model_path, dtype=dtype, attn_implementation="sdpa")
        model.to(device).eval()
        if any(t != "full_attention" for t in getattr(model.config, "layer_types", None) or []):
            raise ValueError("models with sliding-window or linear-attention layers are not supported")
        log.info("loaded %s on %s/%s in %.1fs", config.model_path, device, dtype, time.perf_counter() - t0)
        return cls(config, model, tok, device, dtype)

    # ---- tokens -----------------------------------------------------------------------------
    def _template(self, system: str) -> tuple[torch.Tensor, str]:
        """Split the chat template around the user turn: (system ids (S,), query suffix text)."""
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                [{"role": "system", "content": system}, {"role": "user", "content": _PLACEHOLDER}],
                tokenize=False,
                add_generation_prompt=True,
            )
            head, _, tail = text.partition(_PLACEHOLDER)
        else:
            head, tail = system + "\n\n", "\nAnswer:"
        return self.encode(head), tail

    def encode(self, text: str) -> torch.Tensor:
        """(T,) int64 ids, no special tokens added (template markers in the text still parse)."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return torch.tensor(ids, dtype=torch.long)

    def chunk_ids(self, text: str) -> torch.Tensor:
        return self.encode(text + "\n\n")

    def query_ids(self, prompt: str) -> torch.Tensor:
        return self.encode(prompt + self.query_suffix)

    # ---- forward passes -----------------------------------------------------------------------
    def new_cache(self, prefix_kv: PrefixKV | None = None) -> DynamicCache:
        if not prefix_kv:
            return DynamicCache(config=self.model.config)
        check_prefix_kv(prefix_kv, self.n_layers, self.kv_heads, self.head_dim)
        data = [(k.to(self.device, self.dtype).clone(), v.to(self.device, self.dtype).clone()) for k, v in prefix_kv]
        return DynamicCache(ddp_cache_data=data, config=self.model.config)

    @staticmethod
    def cache_len(cache: DynamicCache) -> int:
        return cache.get_seq_length()

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, cache: DynamicCache, start: int) -> torch.Tensor:
        """Append ``ids`` (T,) at positions start..start+T-1 to ``cache``; return last logits (vocab,)."""
        assert ids.dim() == 1 and ids.numel() > 0
        pos = torch.arange(start, start + ids.numel(), device=self.device)[None]  # (1, T)
        out = self.model(ids[None].to(self.device), cache=cache, position_ids=pos, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1].float()  # (vocab,)

    @torch.inference_mode()
    def chunk_kv(self, ids: torch.Tensor) -> torch.Tensor:
        """KV of a chunk computed alone at positions 0..T-1: (layers, 2, kv_heads, T, head_dim), on CPU."""
        cache = self.new_cache()
        self.forward(ids, cache, 0)
        return stack_kv([(layer.keys, layer.values) for layer in cache.layers]).cpu()

    def encode_chunk(self, text: str) -> ChunkKV:
        ids = self.chunk_ids(text)
        if ids.numel() == 0:
            raise ValueError("empty chunk")
        return ChunkKV(token_ids=ids, kv=self.chunk_kv(ids))

    # ---- generation ---------------------------------------------------------------------------
    def check_length(self, prefix: int, prompt: int, max_tokens: int) -> None:
        if prefix + prompt + max_tokens > self.max_context:
            raise PromptTooLong(
                f"prompt of {prompt} tokens (+{prefix} prefix, +{max_tokens} to generate) "
                f"exceeds the context limit of {self.max_context}"
            )

    @torch.inference_mode()
    def generate(
        self,
        prompt: str,
        chunks: Sequence[ChunkKV] = (),
        *,
        mode: Mode = "blend",
        blend: BlendConfig = BlendConfig(),
        prefix_kv: PrefixKV | None = None,
        max_tokens: int = 64,
    ) -> Generation:
        """Greedy generation for ``[prefix_kv] + system + chunks + prompt``.

        ``prefix_kv``: per layer (K, V), each (1, kv_heads, p, head_dim), at positions 0..p-1.
        ``chunks``: stored chunk KVs (``kv`` may be None in ``full`` mode).
        """
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        p = check_prefix_kv(prefix_kv, self.n_layers, self.kv_heads, self.head_dim) if prefix_kv else 0
        q_ids = self.query_ids(prompt)  # (Q,)
        n_prompt = int(self.system_ids.numel()) + sum(c.n_tokens for c in chunks) + int(q_ids.numel())
        self.check_length(p, n_prompt, max_tokens)

        ctx = build_context(self, self.system_ids, list(chunks), mode, blend, prefix_kv)
        logits = self.forward(q_ids, ctx.cache, ctx.n_tokens)  # (vocab,)
        first_logits = logits.clone()
        pos = ctx.n_tokens + int(q_ids.numel())
        out: list[int] = []
        first_at = 0.0
        for step in range(max_tokens):
            tok = int(torch.argmax(logits))
            if step == 0:
                first_at = time.perf_counter()
            if tok in self.eos_ids:
                break
            out.append(tok)
            if step + 1 == max_tokens:
                break
            logits = self.forward(torch.tensor([tok]), ctx.cache, pos)
            pos += 1
        return Generation(
            token_ids=out,
            text=self.tokenizer.decode(out, skip_special_tokens=True),
            prompt_tokens=n_prompt,
            prefix_tokens=p,
            recomputed_tokens=ctx.recomputed_tokens,
            first_token_at=first_at,
            finished_at=time.perf_counter(),
            first_logits=first_logits,
        )
