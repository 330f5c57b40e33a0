"""CacheBlend: turn an exact past (prefix + system) and stored chunk KVs into one KV state.

Pure blending over a model and KV tensors: nothing here knows the engine, its modes or its
tokenizer (``engine.py`` calls down into :func:`blend`; this module calls only into ``kv``).

Design choices:
- Start from ``reuse`` (every chunk's stored KV re-rotated into place, see ``kv.place_chunks``)
  and recompute a selected subset of chunk tokens through the decoder layers; their new K/V
  overwrite the cached ones, the rest keep the re-rotated cached KV (Yao et al., 2024).
- The blend loop runs the model's own decoder layer modules with a position-built additive mask;
  a small cache adapter (:class:`_ScatterKV`) receives each layer's new K/V through the standard
  ``cache.update`` call, measures deviation, and writes them into the full KV at token slots.
- Token selection (:class:`BlendConfig`), all within a budget of ⌈ratio × chunk tokens⌉:
  * ``deviation`` (CacheBlend): layers ``0..check_layer`` are computed for every chunk token; at
    ``check_layer`` tokens are ranked by the squared deviation of their fresh K and V from the
    cached ones; later layers compute only the top ones. ``per_chunk`` spends the budget chunk
    by chunk (⌈ratio × T_i⌉ each) instead of globally; ``adaptive_mass`` keeps only the fewest
    tokens that carry that share of the total deviation (the budget is then a cap);
    ``sink_tokens`` always includes the first tokens of every chunk.
  * ``chunk_start`` (EPIC, Hu et al., 2024; the default): the first ⌈ratio × T_i⌉ tokens of each chunk, known
    before any layer runs, so no full-width check layers are paid for: the attention-sink tokens
    at chunk starts carry most of the error of independently computed chunks.
- ``recompute_ratio=1.0`` recomputes every token in every layer and equals full prefill up to
  fp32 rounding (tested); ``0.0`` keeps the stored KV after the check layer (= reuse).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from app.inference.kv import (
    ChunkKV,
    PrefixKV,
    causal_position_mask,
    place_chunks,
    prefix_length,
    stack_kv,
    unstack_kv,
)

Selection = Literal["deviation", "chunk_start"]


@dataclass(frozen=True)
class BlendConfig:
    check_layer: int = 1  # deviation: layers 0..check_layer are computed for every chunk token
    # budget: share of chunk tokens computed through every layer. 0.25 since issue 19's second
    # round: on 4 pilot examples it lowered the KL to full prefill from 0.14 (0.15) to 0.09 at
    # 3.2x; on the held-out run it kept >= 3x, but still loses gold likelihood (docs/inference.md)
    recompute_ratio: float = 0.25
    # EPIC since issue 19: on 21 held-out ~2k-token examples EPIC at 0.15 had a lower KL to
    # full prefill than deviation@L1 at 0.15 (paired -0.056 ± 0.044), was 1.24x faster, and tied
    # on gold log-likelihood and F1 (docs/inference.md)
    selection: Selection = "chunk_start"
    per_chunk: bool = False  # deviation: ⌈ratio × T_i⌉ per chunk instead of one global top-k
    adaptive_mass: float | None = None  # deviation: fewest tokens holding this share of it (≤ budget)
    sink_tokens: int = 0  # deviation: the first tokens of every chunk are always recomputed

    def __post_init__(self) -> None:
        if self.check_layer < 1:
            raise ValueError("check_layer must be >= 1 (layer-0 K/V never deviate: they see no context)")
        if not 0.0 <= self.recompute_ratio <= 1.0:
            raise ValueError("recompute_ratio must lie in [0, 1]")
        if self.selection not in ("deviation", "chunk_start"):
            raise ValueError(f"unknown selection {self.selection!r}")
        if self.adaptive_mass is not None and not 0.0 < self.adaptive_mass <= 1.0:
            raise ValueError("adaptive_mass must lie in (0, 1]")
        if self.sink_tokens < 0:
            raise ValueError("sink_tokens must be >= 0")


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


def planned_recompute(chunk_lengths: list[int], config: BlendConfig) -> int:
    """Chunk tokens ``blend`` computes through every layer (an upper bound with ``adaptive_mass``)."""
    if config.selection == "chunk_start" or config.per_chunk:
        return sum(n_recompute(t, config.recompute_ratio) for t in chunk_lengths)
    total = sum(chunk_lengths)
    forced = sum(min(t, config.sink_tokens) for t in chunk_lengths)
    return max(n_recompute(total, config.recompute_ratio), forced)


def _chunk_bounds(chunks: list[ChunkKV]) -> list[tuple[int, int]]:
    out, start = [], 0
    for c in chunks:
        out.append((start, start + c.n_tokens))
        start += c.n_tokens
    return out


def chunk_starts(chunks: list[ChunkKV], ratio: float) -> torch.Tensor:
    """EPIC: indices of the first ⌈ratio × T_i⌉ tokens of every chunk (sorted)."""
    idx = [torch.arange(a, a + n_recompute(b - a, ratio)) for a, b in _chunk_bounds(chunks)]
    return torch.cat(idx)


def select_by_deviation(deviation: torch.Tensor, chunks: list[ChunkKV], config: BlendConfig) -> torch.Tensor:
    """Indices (sorted, into the chunk tokens) to keep computing after the check layer.

    ``deviation``: (T,) squared K+V deviation of every chunk token at the check layer.
    """
    T = deviation.numel()
    score = deviation.clone()
    forced = torch.zeros(T, dtype=torch.bool, device=deviation.device)
    if config.sink_tokens:
        for a, b in _chunk_bounds(chunks):
            forced[a:min(b, a + config.sink_tokens)] = True
        score[forced] = float("inf")
    if config.per_chunk:
        picks = []
        for a, b in _chunk_bounds(chunks):
            k = max(n_recompute(b - a, config.recompute_ratio), int(forced[a:b].sum()))
            picks.append(a + torch.topk(score[a:b], k).indices)
        return torch.cat(picks).sort().values
    budget = max(n_recompute(T, config.recompute_ratio), int(forced.sum()))
    if config.adaptive_mass is not None and budget:
        ranked = deviation.sort(descending=True).values
        share = ranked.cumsum(0) / ranked.sum().clamp_min(1e-30)
        needed = int((share < config.adaptive_mass).sum()) + 1  # fewest tokens reaching the mass
        budget = max(min(budget, needed), int(forced.sum()))
    return torch.topk(score, budget).indices.sort().values


@torch.inference_mode()
def blend(
    model: torch.nn.Module,
    past: PrefixKV,  # per layer (1, H, P, D): the exact prefix + system KV, positions 0..P-1
    chunks: list[ChunkKV],
    config: BlendConfig,
    inv_freq: torch.Tensor,  # (head_dim/2,) the model's RoPE inverse frequencies
) -> tuple[PrefixKV, int]:
    """CacheBlend over the chunk tokens, after a fixed, exact ``past``.

    Returns the full per-layer KV (past + chunks, positions 0..P+T-1) and the number of chunk
    tokens computed through every layer. ``past`` is not modified.
    """
    assert chunks and all(c.kv is not None for c in chunks), "blend needs every chunk's stored KV"
    layers = model.model.layers
    n_layers = len(layers)
    param = next(model.parameters())
    device, dtype = param.device, param.dtype
    deviation_check = config.selection == "deviation"
    if deviation_check and config.check_layer >= n_layers:
        raise ValueError(f"check_layer {config.check_layer} >= {n_layers} layers")
    P = prefix_length(past)
    placed = place_chunks(chunks, P, inv_freq, device).to(dtype)  # (L, 2, H, T, D), a new tensor
    T = placed.shape[3]
    slab = torch.cat((stack_kv(past), placed), dim=3) if P else placed  # (L, 2, H, P+T, D)
    full = unstack_kv(slab)  # per layer (K, V) views, each (1, H, P+T, D)

    ids = torch.cat([c.token_ids for c in chunks]).to(device)  # (T,)
    if deviation_check:
        sel = torch.arange(T, device=device)  # chunk-token indices still being computed
    else:
        sel = chunk_starts(chunks, config.recompute_ratio).to(device)
        if sel.numel() == 0:
            return full, 0  # ratio 0: the re-rotated cached KV (= reuse)
    hidden = model.model.embed_tokens(ids[sel])[None]  # (1, n, hidden)
    slots = P + sel  # (n,) positions == indices into the full KV
    mask = causal_position_mask(slots, P + T, dtype)  # (1, 1, n, P+T)
    rope = model.model.rotary_emb(hidden, slots[None])  # cos, sin: (1, n, D)
    for i, layer in enumerate(layers):
        measure = deviation_check and i == config.check_layer
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
            top = select_by_deviation(adapter.deviation, chunks, config)  # (keep,) into sel
            if top.numel() == sel.numel():
                continue  # everything stays computed (ratio 1.0)
            sel = sel[top]
            if top.numel() == 0:
                break  # ratio 0: later layers keep the re-rotated cached KV (= reuse)
            hidden, slots = hidden[:, top], P + sel
            mask, rope = mask[:, :, top], (rope[0][:, top], rope[1][:, top])
    return full, int(sel.numel())
