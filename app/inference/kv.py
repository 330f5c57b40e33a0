"""KV tensors: layouts, prefix KV, RoPE re-rotation, position masks. The bottom layer of the tier.

Layers call downward only: ``kv`` (this module: no model, no engine) <- ``blend`` (pure blending
over a model and caches) <- ``engine`` (model, modes, generation) <- ``server``.

Design choices:
- A stored chunk is one tensor ``(layers, 2, kv_heads, T, head_dim)`` (index 0 = keys,
  1 = values) plus its token ids: one safetensors entry, a byte count that is just ``nbytes``,
  and token slicing along one axis.
- A request's working KV is a list per layer of ``(K, V)``, each ``(1, kv_heads, T, head_dim)``:
  the form ``DynamicCache(ddp_cache_data=...)`` takes and ``cache.layers[i].keys`` holds
  (transformers 5.x). The same form is the ``prefix_kv`` contract for cartridges.
- A prefix becomes a cache one way only, :func:`prefix_cache`; its length is computed one way
  only, :func:`prefix_length`. ``DynamicLayer.update`` concatenates (``torch.cat``) into new
  tensors, so the cache never writes into the caller's prefix tensors and needs no copy; the
  rows of a batch are broadcast views, so gradients flow back into cartridge parameters.
- Cached keys are stored *after* RoPE. RoPE rotates each frequency pair by ``pos * theta_i``,
  so moving a key from position ``p`` to ``p + d`` is one more rotation by ``d * theta_i``:
  apply RoPE with position ``d``. Values carry no position. Rotation is done in fp32 and is
  exact up to fp32 rounding of the angles (the model rounds its own angles the same way).
- Only plain RoPE is supported (the llama ``rotate_half`` layout over the full head dim, with a
  position-independent ``inv_freq``): ``default``, ``linear`` and ``llama3`` rope types.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

LayerKV = tuple[torch.Tensor, torch.Tensor]  # K, V: (1, kv_heads, T, head_dim) each
PrefixKV = list[LayerKV]  # one entry per decoder layer

STATIC_ROPE_TYPES = {"default", "linear", "llama3"}


@dataclass(frozen=True)
class ChunkKV:
    """A chunk's token ids and the KV it produced when computed alone at positions 0..T-1."""

    token_ids: torch.Tensor  # (T,) int64
    kv: torch.Tensor | None  # (layers, 2, kv_heads, T, head_dim); None when only ids are needed

    def __post_init__(self) -> None:
        assert self.token_ids.dim() == 1, self.token_ids.shape
        if self.kv is not None:
            assert self.kv.dim() == 5 and self.kv.shape[1] == 2, self.kv.shape
            assert self.kv.shape[3] == self.token_ids.numel(), (self.kv.shape, self.token_ids.shape)

    @property
    def n_tokens(self) -> int:
        return int(self.token_ids.numel())

    @property
    def nbytes(self) -> int:
        kv_bytes = 0 if self.kv is None else self.kv.numel() * self.kv.element_size()
        return kv_bytes + self.token_ids.numel() * self.token_ids.element_size()


def stack_kv(layers: PrefixKV) -> torch.Tensor:
    """[(K, V)] per layer, each (1, H, T, D) -> (layers, 2, H, T, D)."""
    return torch.stack([torch.stack((k[0], v[0])) for k, v in layers])


def unstack_kv(kv: torch.Tensor) -> PrefixKV:
    """(layers, 2, H, T, D) -> [(K, V)] per layer, each (1, H, T, D) (views, no copy)."""
    return [(kv[i, 0].unsqueeze(0), kv[i, 1].unsqueeze(0)) for i in range(kv.shape[0])]


def prefix_length(prefix_kv: PrefixKV | None) -> int:
    """p: the number of token positions a prefix occupies (0 for none)."""
    return 0 if not prefix_kv else int(prefix_kv[0][0].shape[2])


def prefix_cache(
    prefix_kv: PrefixKV | None, batch_size: int = 1, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> DynamicCache:
    """A fresh ``DynamicCache`` holding ``prefix_kv`` (positions 0..p-1) for ``batch_size`` rows.

    ``forward`` appends to the cache, so build one per sequence of forward passes. The caller's
    tensors are never written (the cache concatenates into new ones); with ``device``/``dtype``
    they are converted first (a copy only where the conversion needs one).
    """
    if not prefix_kv:
        return DynamicCache()
    data = []
    for k, v in prefix_kv:
        assert k.dim() == 4 and k.shape[0] == 1 and k.shape == v.shape, k.shape  # (1, H, p, D)
        if device is not None or dtype is not None:
            k, v = k.to(device=device, dtype=dtype), v.to(device=device, dtype=dtype)
        data.append((k.expand(batch_size, -1, -1, -1), v.expand(batch_size, -1, -1, -1)))
    return DynamicCache(ddp_cache_data=data)


def query_positions(
    prefix_kv: PrefixKV | None, length: int, batch_size: int = 1, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Position ids ``(batch, length)`` for tokens that follow the prefix."""
    start = prefix_length(prefix_kv)
    return torch.arange(start, start + length, device=device)[None].expand(batch_size, -1)


def compute_kv(model: torch.nn.Module, ids: torch.Tensor, after: PrefixKV | None = None) -> PrefixKV:
    """The KV of ``ids`` (T,) computed alone at positions 0..T-1, or behind ``after`` (a prefix's
    KV at 0..S-1, not written) at S..S+T-1: per layer (K, V) of ``ids``' tokens only, each
    (1, kv_heads, T, head_dim), on the model's device. The one way a prefix KV is computed
    (chunk KVs, alone or anchored behind the system segment; cartridge initialisation,
    self-study contexts)."""
    assert ids.dim() == 1 and ids.numel() > 0, ids.shape
    device = next(model.parameters()).device
    s = prefix_length(after)
    cache = prefix_cache(after, device=device)
    with torch.inference_mode():
        model(
            ids[None].to(device),
            cache=cache,
            use_cache=True,
            position_ids=torch.arange(s, s + ids.numel(), device=device)[None],
            logits_to_keep=1,
        )
    return [(k[:, :, s:], v[:, :, s:]) for k, v in cache_layers(cache)]


def append_kv(cache: DynamicCache, kv: torch.Tensor) -> None:
    """Append a stacked KV ``(layers, 2, H, T, D)`` (e.g. placed chunks) to a batch-1 cache."""
    assert kv.dim() == 5 and kv.shape[1] == 2, kv.shape
    for i in range(kv.shape[0]):
        cache.layers[i].update(kv[i, 0].unsqueeze(0), kv[i, 1].unsqueeze(0))


def cache_layers(cache: DynamicCache) -> PrefixKV:
    """The per-layer (K, V) a cache holds now (the cache's own tensors, not copies)."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def rope_inv_freq(model: torch.nn.Module) -> torch.Tensor:
    """The model's RoPE inverse frequencies (head_dim/2,), fp32; refuses RoPE we can't re-rotate."""
    rotary = model.model.rotary_emb
    rope_type = getattr(rotary, "rope_type", "default")
    if rope_type not in STATIC_ROPE_TYPES:
        raise ValueError(f"rope type {rope_type!r} is position-dependent; re-rotation unsupported")
    return rotary.inv_freq.detach().float().clone()


def rotate_keys(keys: torch.Tensor, delta: torch.Tensor | int, inv_freq: torch.Tensor) -> torch.Tensor:
    """Move post-RoPE keys by ``delta`` positions: keys (..., T, D); delta int or (T,).

    Returns a new tensor in the dtype of ``keys``; the arithmetic is fp32.
    """
    head_dim = keys.shape[-1]
    assert inv_freq.numel() * 2 == head_dim, "partial rotary embeddings are not supported"
    n = keys.shape[-2]
    if isinstance(delta, int):
        delta = torch.full((n,), delta, dtype=torch.float32)
    assert delta.shape == (n,), (delta.shape, n)
    freqs = delta.to(keys.device, torch.float32)[:, None] * inv_freq.to(keys.device)[None, :]  # (T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, D)
    cos, sin = emb.cos(), emb.sin()
    k = keys.float()
    half = head_dim // 2
    rotated_half = torch.cat((-k[..., half:], k[..., :half]), dim=-1)
    return (k * cos + rotated_half * sin).to(keys.dtype)


def place_chunks(chunks: list[ChunkKV], start: int, inv_freq: torch.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
    """Concatenate chunk KVs along tokens and re-rotate keys so chunk tokens sit at
    ``start, start+1, ...`` (each chunk was computed at 0..T_i-1).

    Returns (layers, 2, H, sum T_i, D) on ``device``, a new tensor (safe to write into).
    """
    assert chunks and all(c.kv is not None for c in chunks)
    kv = torch.cat([c.kv.to(device, non_blocking=True) for c in chunks], dim=3)  # (L, 2, H, T, D)
    deltas, pos = [], start
    for c in chunks:
        deltas.append(torch.full((c.n_tokens,), pos, dtype=torch.float32))
        pos += c.n_tokens
    kv[:, 0] = rotate_keys(kv[:, 0], torch.cat(deltas), inv_freq)
    return kv


def causal_position_mask(q_pos: torch.Tensor, n_keys: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask (1, 1, Q, K): query at position q_pos[i] sees keys at positions 0..q_pos[i].

    Key j sits at position j (the KV of a request is laid out contiguously from 0).
    """
    k_pos = torch.arange(n_keys, device=q_pos.device)
    allowed = k_pos[None, :] <= q_pos[:, None]  # (Q, K)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=q_pos.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def check_prefix_kv(prefix_kv: PrefixKV, n_layers: int, kv_heads: int, head_dim: int) -> int:
    """Validate the cartridge contract; return the prefix length p."""
    if len(prefix_kv) != n_layers:
        raise ValueError(f"prefix_kv has {len(prefix_kv)} layers, model has {n_layers}")
    p = prefix_length(prefix_kv)
    for k, v in prefix_kv:
        for t in (k, v):
            if t.dim() != 4 or t.shape[0] != 1 or t.shape[1] != kv_heads or t.shape[3] != head_dim:
                raise ValueError(f"prefix_kv tensor {tuple(t.shape)} != (1, {kv_heads}, p, {head_dim})")
            if t.shape[2] != p:
                raise ValueError("prefix_kv layers disagree on the prefix length")
    return p
