"""CacheBlend and its baselines: turn [prefix KV] + system + chunks into one KV state.

Design choices:
- Every mode goes through :func:`build_context`, which returns the per-layer KV of
  ``prefix_kv + system + chunks`` at contiguous positions 0..N-1. The query is prefilled on top
  of it by the engine in the same way for every mode.
  * ``full``: plain prefill of system + all chunk tokens (the reference).
  * ``prefix``: the leading chunk's stored KV (re-rotated), the rest prefilled on top — vLLM-style
    prefix caching; the stored chunk was computed alone, so unlike a true prefix hit it did not
    attend to the system prompt in front of it.
  * ``reuse``: every chunk's stored KV re-rotated, nothing recomputed (PromptCache-style).
  * ``blend``: CacheBlend (Yao et al., 2024) — start from ``reuse``; recompute layers
    ``0..check_layer`` for all chunk tokens; at ``check_layer`` rank tokens by the deviation of
    their freshly computed K and V from the cached ones; in later layers recompute only the top
    ``recompute_ratio`` of chunk tokens, whose new K/V are scattered into the cached KV.
- The system prompt and any cartridge prefix come first and are never approximated: the system
  prompt is prefilled normally, so it is exact in every mode.
- The blend loop runs the model's own decoder layer modules with a position-built additive mask;
  a small cache adapter (:class:`_ScatterKV`) receives each layer's new K/V through the standard
  ``cache.update`` call, measures deviation, and writes them into the full KV at token slots.
- ``recompute_ratio=1.0`` recomputes every token in every layer and equals ``full`` up to fp32
  rounding; the tests check exactly that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from transformers import DynamicCache

from app.inference.kv import ChunkKV, PrefixKV, causal_position_mask, place_chunks, unstack_kv

if TYPE_CHECKING:
    from app.inference.engine import Engine

Mode = Literal["full", "prefix", "reuse", "blend"]
MODES: tuple[str, ...] = ("full", "prefix", "reuse", "blend")


@dataclass(frozen=True)
class BlendConfig:
    check_layer: int = 1  # layers 0..check_layer are recomputed for every chunk token
    recompute_ratio: float = 0.15  # share of chunk tokens recomputed after the check layer

    def __post_init__(self) -> None:
        if self.check_layer < 1:
            raise ValueError("check_layer must be >= 1 (layer-0 K/V never deviate: they see no context)")
        if not 0.0 <= self.recompute_ratio <= 1.0:
            raise ValueError("recompute_ratio must lie in [0, 1]")


@dataclass
class Context:
    cache: DynamicCache  # per layer K, V each (1, kv_heads, N, head_dim); positions 0..N-1
    n_tokens: int  # N = prefix + system + chunk tokens
    recomputed_tokens: int  # chunk tokens whose KV was computed through every layer


class _ScatterKV:
    """Cache adapter for one decoder layer: writes the computed tokens' K/V into the full KV.

    ``keys``/``values``: (1, H, N, D), written in place; ``slots``: (n,) token indices being
    computed. With ``measure`` set, records each slot's squared K+V deviation from what was
    there before (the re-rotated cached KV).
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, slots: torch.Tensor, measure: bool):
        self.keys, self.values, self.slots, self.measure = keys, values, slots, measure
        self.deviation: torch.Tensor | None = None  # (n,)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        # key_states, value_states: (1, H, n, D) for the computed tokens, keys already rotated
        if self.measure:
            old_k = self.keys.index_select(2, self.slots).float()
            old_v = self.values.index_select(2, self.slots).float()
            dk = (key_states.float() - old_k).pow(2).sum(dim=(0, 1, 3))
            dv = (value_states.float() - old_v).pow(2).sum(dim=(0, 1, 3))
            self.deviation = dk + dv  # (n,)
        self.keys.index_copy_(2, self.slots, key_states)
        self.values.index_copy_(2, self.slots, value_states)
        return self.keys, self.values


def n_recompute(n_tokens: int, ratio: float) -> int:
    return min(n_tokens, math.ceil(ratio * n_tokens - 1e-9))


@torch.inference_mode()
def build_context(
    engine: Engine,
    system_ids: torch.Tensor,  # (S,)
    chunks: list[ChunkKV],
    mode: Mode,
    config: BlendConfig,
    prefix_kv: PrefixKV | None = None,  # per layer (1, H, p, D), positions 0..p-1
) -> Context:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    n_layers = engine.n_layers
    # 1. prefix (cartridges) + system prompt, always exact
    cache = engine.new_cache(prefix_kv)
    pos = engine.cache_len(cache)
    if system_ids.numel():
        engine.forward(system_ids, cache, pos)
        pos += int(system_ids.numel())
    if not chunks:
        return Context(cache, n_tokens=pos, recomputed_tokens=0)

    n_chunk_tokens = sum(c.n_tokens for c in chunks)
    if mode != "full" and any(c.kv is None for c in chunks):
        raise ValueError(f"mode {mode!r} needs the stored KV of every chunk")
    if mode == "full":
        ids = torch.cat([c.token_ids for c in chunks])
        engine.forward(ids, cache, pos)
        return Context(cache, pos + n_chunk_tokens, recomputed_tokens=n_chunk_tokens)

    if mode in ("prefix", "reuse"):
        n_reused = 1 if mode == "prefix" else len(chunks)
        placed = place_chunks(chunks[:n_reused], pos, engine.inv_freq, engine.device).to(engine.dtype)
        for i in range(n_layers):
            cache.layers[i].update(placed[i, 0].unsqueeze(0), placed[i, 1].unsqueeze(0))
        pos += placed.shape[3]
        rest = chunks[n_reused:]
        if rest:
            engine.forward(torch.cat([c.token_ids for c in rest]), cache, pos)
            pos += sum(c.n_tokens for c in rest)
        return Context(cache, pos, recomputed_tokens=n_chunk_tokens - placed.shape[3])

    past = [(layer.keys, layer.values) for layer in cache.layers] if pos else []
    kv, recomputed = blend_layers(engine, past, chunks, config)
    return Context(DynamicCache(ddp_cache_data=kv), pos + n_chunk_tokens, recomputed_tokens=recomputed)


@torch.inference_mode()
def blend_layers(engine: Engine, past: PrefixKV, chunks: list[ChunkKV], config: BlendConfig) -> tuple[PrefixKV, int]:
    """CacheBlend over the chunk tokens, after a fixed, exact ``past`` (prefix + system).

    Returns the full per-layer KV (past + chunks) and the number of chunk tokens recomputed in
    every layer.
    """
    model, device, dtype = engine.model, engine.device, engine.dtype
    n_layers = engine.n_layers
    if config.check_layer >= n_layers:
        raise ValueError(f"check_layer {config.check_layer} >= {n_layers} layers")
    P = past[0][0].shape[2] if past else 0
    placed = place_chunks(chunks, P, engine.inv_freq, device).to(dtype)  # (L, 2, H, T, D)
    T = placed.shape[3]
    if P:
        slab = torch.cat((torch.stack([torch.stack((k[0], v[0])) for k, v in past]), placed), dim=3)
    else:
        slab = placed  # fresh tensor from place_chunks: ours to write into
    full = unstack_kv(slab)  # per layer (K, V) views, each (1, H, P+T, D)

    ids = torch.cat([c.token_ids for c in chunks]).to(device)  # (T,)
    sel = torch.arange(T, device=device)  # chunk-token indices still being computed
    keep = n_recompute(T, config.recompute_ratio)
    hidden = model.model.embed_tokens(ids)[None]  # (1, T, hidden)
    slots = P + sel  # (n,) positions == indices into the full KV
    mask = causal_position_mask(slots, P + T, dtype)  # (1, 1, n, P+T)
    rope = model.model.rotary_emb(hidden, slots[None])  # cos, sin: (1, n, D)
    for i, layer in enumerate(model.model.layers[:n_layers]):
        measure = i == config.check_layer and keep < sel.numel()
        adapter = _ScatterKV(full[i][0], full[i][1], slots, measure)
        hidden = layer(
            hidden,
            attention_mask=mask,
            position_ids=slots[None],
            position_embeddings=rope,
            cache=adapter,
            use_cache=True,
        )  # (1, n, hidden)
        if measure:
            top = torch.topk(adapter.deviation, keep).indices.sort().values  # (keep,)
            if keep == 0:
                sel = sel[top]
                break  # ratio 0: later layers keep the re-rotated cached KV (= reuse)
            sel, hidden = sel[top], hidden[:, top]
            slots = P + sel
            mask, rope = mask[:, :, top], (rope[0][:, top], rope[1][:, top])
    return full, int(sel.numel())
