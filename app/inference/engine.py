"""Engine: a HuggingFace causal LM with RoPE, the context modes, and generation from a KV state.

Design choices:
- Loaded by path (any local Llama/Qwen-family checkpoint) with the project's one loader
  (``app.kit.runtime.localmodel.load_causal_lm``); CPU fp32 by default, CUDA bf16 when a GPU is present.
  Nothing is read from the environment here: :func:`config_from_env` is called by the CLI (and
  the precompute hook) at start-up.
- ``model_id`` is the checkpoint's identity (its folder name), the id a cartridge records;
  ``kv_id`` adds the dtype and keys the chunk KV store, so KV computed in another dtype is never
  mixed in; with anchored chunks (below) it also names the anchor (a hash of the system
  segment's ids), so KV computed behind another system prompt, or alone, is never mixed in either.
- **Anchored chunk KV** (``EngineConfig.anchor_chunks``, the default): a chunk's KV is computed
  *behind the system segment* (positions S..S+T-1, the system's KV computed once per engine) and
  stored re-rotated to 0..T-1, instead of alone at 0..T-1. A chunk computed alone makes its first
  tokens an attention sink that the real prompt does not have (EPIC's finding); behind the system
  segment the sink is the system's first token, as in every real prompt. The first chunk's stored
  KV is then exact (a real prefix-cache hit), and reusing chunks unchanged loses far less
  (docs/inference.md has the measurements).
- transformers 5.x cache API: ``DynamicCache``, ``model(ids, cache=..., position_ids=...)``,
  ``cache.layers[i].keys``; forward appends to the cache in place.
- A prompt is ``[prefix_kv] + system + chunks + query``: the system segment and the query suffix
  come from the model's chat template (the chunks and the question form the user turn), each
  chunk is tokenized alone as ``text + "\\n\\n"`` (so its stored KV and ids are a function of its
  text), and every segment is tokenized separately, identically in every mode.
- Modes (:meth:`Engine.build_context`) differ only in how the chunk KV is obtained; the prefix
  and the system prompt are always prefilled exactly:
  * ``full``: plain prefill of all chunk tokens (the reference);
  * ``prefix``: the first chunk's stored KV re-rotated into place, the rest prefilled on top
    (vLLM-style prefix caching; exact with anchored chunks and no cartridge prefix);
  * ``reuse``: every chunk's stored KV re-rotated, nothing recomputed (PromptCache-style);
  * ``blend``: CacheBlend (``blend.py``).
- ``prefix_kv`` (cartridges) is a list per layer of (K, V), each (1, kv_heads, p, head_dim),
  positioned at 0..p-1; everything else continues at p.
- Greedy decoding with the project's one decode loop (``app.kit.runtime.localmodel.decode``); the time
  of the first generated token is recorded for TTFT.
- Prefill in pieces (``EngineConfig.prefill_chunk_tokens``): a segment longer than a piece (the
  chunks in ``full`` mode, a long query) is prefilled piece by piece over the growing cache, so a
  long prompt offers the server's scheduler a yield point every layer of one piece
  (app/inference/scheduler.py); shorter segments run exactly as one pass, as before.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import DynamicCache

from app.inference.blend import BlendConfig, blend
from app.inference.kv import (
    ChunkKV,
    PrefixKV,
    append_kv,
    cache_layers,
    check_prefix_kv,
    compute_kv,
    place_chunks,
    prefix_cache,
    prefix_length,
    rope_inv_freq,
    rotate_keys,
    stack_kv,
)
from app.inference.modes import MODES, Mode
from app.kit.runtime.localmodel import DecodeTimes, decode, load_causal_lm, stop_token_ids

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
    anchor_chunks: bool = True  # chunk KV computed behind the system segment (module docstring)
    # a longer segment is prefilled in pieces of this many tokens: the scheduler's yield points
    # (between decoder layers, app/inference/scheduler.py) then come at most one piece's layer apart
    prefill_chunk_tokens: int = 512


def config_from_env(environ: dict[str, str] | None = None) -> EngineConfig:
    """MEMSCALE_INFERENCE_MODEL, else the bundled SmolLM2 under MEMSCALE_DATA_DIR (./.memscale)."""
    env = os.environ if environ is None else environ
    path = env.get("MEMSCALE_INFERENCE_MODEL")
    if not path:
        from app.kit.runtime.localmodel import local_model_dir

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


@dataclass
class Context:
    cache: DynamicCache  # per layer K, V each (1, kv_heads, N, head_dim); positions 0..N-1
    n_tokens: int  # N = prefix + system + chunk tokens
    recomputed_tokens: int  # chunk tokens whose KV was computed through every layer


class Engine:
    def __init__(self, config: EngineConfig, model, tokenizer):
        self.config, self.model, self.tokenizer = config, model, tokenizer
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        cfg = model.config
        self.n_layers: int = cfg.num_hidden_layers
        self.kv_heads: int = cfg.num_key_value_heads
        self.head_dim: int = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.max_context = min(config.max_context, getattr(cfg, "max_position_embeddings", config.max_context))
        self.inv_freq = rope_inv_freq(model)  # (head_dim/2,) fp32
        self.model_id = Path(config.model_path).name  # the checkpoint (what a cartridge records)
        self.system_ids, self.query_suffix = self._template(config.system_prompt)
        self.kv_id = f"{self.model_id}-{str(self.dtype).removeprefix('torch.')}"  # chunk KV store key
        # the system segment's KV, computed once: every chunk's KV is computed behind it
        self.anchor_kv: PrefixKV | None = None
        if config.anchor_chunks and self.system_ids.numel():
            self.anchor_kv = compute_kv(model, self.system_ids)
            digest = hashlib.sha256(self.system_ids.numpy().astype("<i8").tobytes()).hexdigest()[:12]
            self.kv_id += f"-a{digest}"
        self.eos_ids = stop_token_ids(model, tokenizer)

    @classmethod
    def load(cls, config: EngineConfig) -> Engine:
        t0 = time.perf_counter()
        model, tok = load_causal_lm(config.model_path, device=config.device, dtype=config.dtype, threads=config.threads)
        if any(t != "full_attention" for t in getattr(model.config, "layer_types", None) or []):
            raise ValueError("models with sliding-window or linear-attention layers are not supported")
        engine = cls(config, model, tok)
        log.info("loaded %s on %s/%s in %.1fs", config.model_path, engine.device, engine.dtype, time.perf_counter() - t0)
        return engine

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
        """A cache holding ``prefix_kv`` (validated, in the engine's device and dtype), or empty."""
        if prefix_kv:
            check_prefix_kv(prefix_kv, self.n_layers, self.kv_heads, self.head_dim)
        return prefix_cache(prefix_kv, device=self.device, dtype=self.dtype)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, cache: DynamicCache, start: int) -> torch.Tensor:
        """Append ``ids`` (T,) at positions start..start+T-1 to ``cache``; return last logits (vocab,)."""
        assert ids.dim() == 1 and ids.numel() > 0
        step = max(1, self.config.prefill_chunk_tokens)
        for i in range(0, ids.numel(), step):  # pieces: each attends to the cache the earlier ones filled
            piece = ids[i : i + step]
            pos = torch.arange(start + i, start + i + piece.numel(), device=self.device)[None]  # (1, t)
            out = self.model(piece[None].to(self.device), cache=cache, position_ids=pos, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1].float()  # (vocab,)

    @torch.inference_mode()
    def chunk_kv(self, ids: torch.Tensor) -> torch.Tensor:
        """A chunk's stored KV, keys at positions 0..T-1: (layers, 2, kv_heads, T, head_dim), on CPU.

        Anchored: computed behind the system segment at S..S+T-1, the keys rotated back by S
        (``place_chunks`` moves them to wherever the chunk lands); else computed alone.
        """
        kv = stack_kv(compute_kv(self.model, ids, after=self.anchor_kv))  # (L, 2, H, T, D), a new tensor
        if self.anchor_kv is not None:
            kv[:, 0] = rotate_keys(kv[:, 0], -prefix_length(self.anchor_kv), self.inv_freq)
        return kv.cpu()

    def encode_chunk(self, text: str) -> ChunkKV:
        ids = self.chunk_ids(text)
        if ids.numel() == 0:
            raise ValueError("empty chunk")
        return ChunkKV(token_ids=ids, kv=self.chunk_kv(ids))

    # ---- context modes ------------------------------------------------------------------------
    @torch.inference_mode()
    def build_context(
        self,
        chunks: Sequence[ChunkKV],
        mode: Mode = "blend",
        config: BlendConfig = BlendConfig(),
        prefix_kv: PrefixKV | None = None,  # per layer (1, H, p, D), positions 0..p-1
        query_ids: torch.Tensor | None = None,  # (Q,) the query that will follow (BlendConfig selection "query")
    ) -> Context:
        """The KV of ``prefix_kv + system + chunks`` at contiguous positions 0..N-1."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        chunks = list(chunks)
        # 1. prefix (cartridges) + system prompt, always exact
        cache = self.new_cache(prefix_kv)
        pos = cache.get_seq_length()
        if self.system_ids.numel():
            self.forward(self.system_ids, cache, pos)
            pos += int(self.system_ids.numel())
        if not chunks:
            return Context(cache, n_tokens=pos, recomputed_tokens=0)
        n_chunk_tokens = sum(c.n_tokens for c in chunks)
        if MODES[mode].stored_kv and any(c.kv is None for c in chunks):
            raise ValueError(f"mode {mode!r} needs the stored KV of every chunk")
        if mode == "full":
            self.forward(torch.cat([c.token_ids for c in chunks]), cache, pos)
            return Context(cache, pos + n_chunk_tokens, recomputed_tokens=n_chunk_tokens)
        if mode == "blend":
            kv, recomputed = blend(
                self.model, cache_layers(cache) if pos else [], chunks, config, self.inv_freq, query_ids=query_ids
            )
            return Context(DynamicCache(ddp_cache_data=kv), pos + n_chunk_tokens, recomputed_tokens=recomputed)
        n_reused = 1 if mode == "prefix" else len(chunks)
        placed = place_chunks(chunks[:n_reused], pos, self.inv_freq, self.device).to(self.dtype)  # (L, 2, H, T, D)
        append_kv(cache, placed)
        pos += placed.shape[3]
        rest = chunks[n_reused:]
        if rest:
            self.forward(torch.cat([c.token_ids for c in rest]), cache, pos)
            pos += sum(c.n_tokens for c in rest)
        return Context(cache, pos, recomputed_tokens=n_chunk_tokens - placed.shape[3])

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

        ctx = self.build_context(chunks, mode, blend, prefix_kv, query_ids=q_ids)
        start, tail = ctx.n_tokens, q_ids
        if q_ids.numel() > self.config.prefill_chunk_tokens:  # a long query is prefilled in pieces too
            self.forward(q_ids[:-1], ctx.cache, start)
            start, tail = start + int(q_ids.numel()) - 1, q_ids[-1:]
        times = DecodeTimes()
        (out,) = decode(
            self.model, ctx.cache, [tail.tolist()], start=start, max_new_tokens=max_tokens, stop_ids=self.eos_ids, times=times
        )
        tokens = out.tokens[:-1] if out.stopped else out.tokens  # the stop token is not part of the text
        return Generation(
            token_ids=tokens,
            text=self.tokenizer.decode(tokens, skip_special_tokens=True),
            prompt_tokens=n_prompt,
            prefix_tokens=p,
            recomputed_tokens=ctx.recomputed_tokens,
            first_token_at=times.first_token_at,
            finished_at=times.finished_at,
            first_logits=out.first_logits,
        )
