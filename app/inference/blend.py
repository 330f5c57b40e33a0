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
  * ``chunk_start`` (EPIC, Hu et al., 2024): the first ⌈ratio × T_i⌉ tokens of each chunk, known
    before any layer runs, so no full-width check layers are paid for: the attention-sink tokens
    at chunk starts carry most of the error of independently computed chunks.
  * ``query`` (the default): the tokens the query attends to. The query's tokens run over the
    reused KV (nothing written into it) through layers ``0..query_layers-1``; their attention
    probabilities over the chunk tokens, summed over heads, query tokens and those layers, rank
    the chunk tokens; the top ⌈ratio × T⌉ are recomputed, the first ⌈start_share × ratio × T_i⌉
    tokens of every chunk always (EPIC's share of the budget; by default half). EPIC recomputes
    where the KV is most wrong on average; this also recomputes where a wrong KV would hurt this
    question (the values the answer needs sit mid-chunk, which EPIC
    never reaches: docs/inference.md). Needs the query, so only ``Engine.generate``-style calls
    that know it (``blend(..., query_ids=)``) can use it.
- ``recompute_ratio=1.0`` recomputes every token in every layer and equals full prefill up to
  fp32 rounding (tested); ``0.0`` keeps the stored KV after the check layer (= reuse).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from app.inference.kv import ChunkKV, PrefixKV, causal_position_mask, place_chunks, prefix_length, stack_kv, unstack_kv

Selection = Literal["deviation", "chunk_start", "query"]


@dataclass(frozen=True)
class BlendConfig:
    check_layer: int = 1  # deviation: layers 0..check_layer are computed for every chunk token
    # budget: share of chunk tokens computed through every layer. 0.25 (docs/inference.md,
    # the second round): on 4 pilot examples it lowered the KL to full prefill from 0.14 (0.15) to 0.09 at
    # 3.2x; on the held-out run it kept >= 3x, but still loses gold likelihood (docs/inference.md)
    recompute_ratio: float = 0.25
    # docs/inference.md, the third round: half the budget on chunk starts (EPIC, the
    # second round's default), half on the tokens the query attends to. Paired against EPIC 0.25 on
    # the held-out examples: gold log-likelihood +0.11 nats/token (CI above 0), KL to full
    # prefill -0.03 (not worse), 3% slower (3.3x full prefill)
    selection: Selection = "query"
    per_chunk: bool = False  # deviation: ⌈ratio × T_i⌉ per chunk instead of one global top-k
    adaptive_mass: float | None = None  # deviation: fewest tokens holding this share of it (≤ budget)
    sink_tokens: int = 0  # deviation, query: the first tokens of every chunk are always recomputed
    query_layers: int = 8  # query: attention summed over the query's first layers (0..query_layers-1)
    start_share: float = 0.5  # query: this share of the budget goes to chunk starts (EPIC's part) first

    def __post_init__(self) -> None:
        if self.check_layer < 1:
            raise ValueError("check_layer must be >= 1 (layer-0 K/V never deviate: they see no context)")
        if not 0.0 <= self.recompute_ratio <= 1.0:
            raise ValueError("recompute_ratio must lie in [0, 1]")
        if self.selection not in ("deviation", "chunk_start", "query"):
            raise ValueError(f"unknown selection {self.selection!r}")
        if self.adaptive_mass is not None and not 0.0 < self.adaptive_mass <= 1.0:
            raise ValueError("adaptive_mass must lie in (0, 1]")
        if self.sink_tokens < 0:
            raise ValueError("sink_tokens must be >= 0")
        if self.query_layers < 1:
            raise ValueError("query_layers must be >= 1")
        if not 0.0 <= self.start_share <= 1.0:
            raise ValueError("start_share must lie in [0, 1]")


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


def _start_ratio(config: BlendConfig) -> float:
    """Share of every chunk recomputed from its start whatever the scores say (query selection)."""
    return config.start_share * config.recompute_ratio if config.selection == "query" else 0.0


def n_recompute(n_tokens: int, ratio: float) -> int:
    return min(n_tokens, math.ceil(ratio * n_tokens - 1e-9))


def planned_recompute(chunk_lengths: list[int], config: BlendConfig) -> int:
    """Chunk tokens ``blend`` computes through every layer (an upper bound with ``adaptive_mass``)."""
    if config.selection == "chunk_start" or config.per_chunk:
        return sum(n_recompute(t, config.recompute_ratio) for t in chunk_lengths)
    total = sum(chunk_lengths)
    forced = sum(min(t, max(config.sink_tokens, n_recompute(t, _start_ratio(config)))) for t in chunk_lengths)
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


def select_top(scores: torch.Tensor, chunks: list[ChunkKV], config: BlendConfig) -> torch.Tensor:
    """Indices (sorted, into the chunk tokens) to compute through the remaining layers.

    ``scores``: (T,) per chunk token, higher = recompute first: the squared K+V deviation at the
    check layer (``deviation``) or the query's attention (``query``).
    """
    T = scores.numel()
    score = scores.clone()
    forced = torch.zeros(T, dtype=torch.bool, device=scores.device)
    starts = _start_ratio(config)
    if config.sink_tokens or starts:
        for a, b in _chunk_bounds(chunks):
            forced[a : min(b, a + max(config.sink_tokens, n_recompute(b - a, starts)))] = True
        score[forced] = float("inf")
    if config.per_chunk:
        picks = []
        for a, b in _chunk_bounds(chunks):
            k = max(n_recompute(b - a, config.recompute_ratio), int(forced[a:b].sum()))
            picks.append(a + torch.topk(score[a:b], k).indices)
        return torch.cat(picks).sort().values
    budget = max(n_recompute(T, config.recompute_ratio), int(forced.sum()))
    if config.adaptive_mass is not None and budget:
        ranked = scores.sort(descending=True).values
        share = ranked.cumsum(0) / ranked.sum().clamp_min(1e-30)
        needed = int((share < config.adaptive_mass).sum()) + 1  # fewest tokens reaching the mass
        budget = max(min(budget, needed), int(forced.sum()))
    return torch.topk(score, budget).indices.sort().values


class _PeekKV:
    """Cache adapter that lets query tokens attend over the full KV without writing into it:
    returns (full keys ++ the query's own), keeping those keys for the caller."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values
        self.seen_keys: torch.Tensor | None = None  # (1, H_kv, N+n, D) after the layer ran

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        self.seen_keys = torch.cat((self.keys, key_states), dim=2)
        return self.seen_keys, torch.cat((self.values, value_states), dim=2)


def query_attention(
    model: torch.nn.Module, full: PrefixKV, query_ids: torch.Tensor, span: tuple[int, int], n_layers: int
) -> torch.Tensor:
    """(span length,) attention mass the query's tokens put on the keys at ``span`` = [a, b) of
    ``full`` (per layer (K, V), (1, H_kv, N, D), positions 0..N-1), summed over heads, query
    tokens and layers ``0..n_layers-1``; the query sits at positions N.. and sees all of ``full``."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    layers = model.model.layers[:n_layers]
    N = full[0][0].shape[2]
    n = int(query_ids.numel())
    pos = torch.arange(N, N + n, device=query_ids.device)
    hidden = model.model.embed_tokens(query_ids)[None]  # (1, n, hidden)
    dtype = hidden.dtype
    mask = causal_position_mask(pos, N + n, dtype)  # (1, 1, n, N+n)
    rope = model.model.rotary_emb(hidden, pos[None])
    a, b = span
    mass = torch.zeros(b - a, dtype=torch.float32, device=query_ids.device)
    for i, layer in enumerate(layers):
        attn = layer.self_attn
        head_dim = attn.head_dim
        q = attn.q_proj(layer.input_layernorm(hidden)).view(1, n, -1, head_dim).transpose(1, 2)  # (1, Hq, n, D)
        q, _ = apply_rotary_pos_emb(q, q, *rope)
        adapter = _PeekKV(full[i][0], full[i][1])
        hidden = layer(
            hidden, attention_mask=mask, position_ids=pos[None], position_embeddings=rope, cache=adapter, use_cache=True
        )
        keys = adapter.seen_keys.repeat_interleave(q.shape[1] // adapter.seen_keys.shape[1], dim=1)  # (1, Hq, N+n, D)
        probs = torch.softmax((q.float() @ keys.float().transpose(-1, -2)) * attn.scaling + mask.float(), dim=-1)
        mass += probs[0, :, :, a:b].sum(dim=(0, 1))
    return mass


@torch.inference_mode()
def blend(
    model: torch.nn.Module,
    past: PrefixKV,  # per layer (1, H, P, D): the exact prefix + system KV, positions 0..P-1
    chunks: list[ChunkKV],
    config: BlendConfig,
    inv_freq: torch.Tensor,  # (head_dim/2,) the model's RoPE inverse frequencies
    query_ids: torch.Tensor | None = None,  # (Q,) the query that follows, for ``selection="query"``
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
        if config.selection == "query":
            if query_ids is None:
                raise ValueError("selection='query' needs the query's token ids")
            mass = query_attention(model, full, query_ids.to(device), (P, P + T), min(config.query_layers, n_layers))
            sel = select_top(mass, chunks, config).to(device)
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
            hidden, attention_mask=mask, position_ids=slots[None], position_embeddings=rope, cache=adapter, use_cache=True
        )  # (1, n, hidden)
        if measure:
            top = select_top(adapter.deviation, chunks, config)  # (keep,) into sel
            if top.numel() == sel.numel():
                continue  # everything stays computed (ratio 1.0)
            sel = sel[top]
            if top.numel() == 0:
                break  # ratio 0: later layers keep the re-rotated cached KV (= reuse)
            hidden, slots = hidden[:, top], P + sel
            mask, rope = mask[:, :, top], (rope[0][:, top], rope[1][:, top])
    return full, int(sel.numel())
