"""RoPE re-rotation and KV layout: the cached-key algebra CacheBlend relies on."""

from __future__ import annotations

import torch

from app.inference.kv import (
    ChunkKV,
    causal_position_mask,
    check_prefix_kv,
    compute_kv,
    place_chunks,
    rotate_keys,
    stack_kv,
    unstack_kv,
)


def _keys_at(engine, ids, offset):
    """Keys and values of ``ids`` prefilled alone at positions offset..offset+T-1: (L, H, T, D) each."""
    cache = engine.new_cache()
    engine.forward(ids, cache, offset)
    return (torch.stack([layer.keys[0] for layer in cache.layers]), torch.stack([layer.values[0] for layer in cache.layers]))


def test_rerotated_keys_equal_keys_computed_at_new_offset(engine, chunks):
    # a chunk computed alone at 0..T-1 (the engine's own chunks are anchored behind the system
    # segment: tests/inference/test_blend.py checks those against full prefill)
    ids = chunks[1].token_ids
    chunk = ChunkKV(token_ids=ids, kv=stack_kv(compute_kv(engine.model, ids)))
    for offset in (5, 37, 250):
        k_ref, v_ref = _keys_at(engine, chunk.token_ids, offset)
        k_rot = rotate_keys(chunk.kv[:, 0], offset, engine.inv_freq)
        scale = k_ref.abs().max().item()
        assert scale > 1.0
        # every layer, head and token: equal up to fp32 rounding of the RoPE angles
        torch.testing.assert_close(k_rot, k_ref, rtol=0, atol=2e-5 * scale)
        # values carry no position: the chunk's stored values are valid anywhere
        torch.testing.assert_close(chunk.kv[:, 1], v_ref, rtol=0, atol=2e-5 * v_ref.abs().max().item())
        # and the un-rotated keys are clearly not (the test would catch a no-op rotation)
        assert (chunk.kv[:, 0] - k_ref).abs().max().item() > 100 * 2e-5 * scale


def test_rotation_composes_and_preserves_norms():
    g = torch.Generator().manual_seed(0)
    keys = torch.randn(2, 3, 10, 64, generator=g)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 64, 2).float() / 64))
    a = rotate_keys(rotate_keys(keys, 7, inv_freq), 11, inv_freq)
    torch.testing.assert_close(a, rotate_keys(keys, 18, inv_freq), rtol=0, atol=1e-5)
    torch.testing.assert_close(rotate_keys(keys, 0, inv_freq), keys)
    back = rotate_keys(rotate_keys(keys, 300, inv_freq), -300, inv_freq)
    torch.testing.assert_close(back, keys, rtol=0, atol=1e-4)
    torch.testing.assert_close(rotate_keys(keys, 9, inv_freq).norm(dim=-1), keys.norm(dim=-1))
    per_token = rotate_keys(keys, torch.arange(10).float(), inv_freq)
    torch.testing.assert_close(per_token[..., 4, :], rotate_keys(keys, 4, inv_freq)[..., 4, :])


def test_place_chunks_puts_each_chunk_after_the_previous(engine, chunks):
    start = 12
    placed = place_chunks(chunks, start, engine.inv_freq)  # (L, 2, H, T, D)
    total = sum(c.n_tokens for c in chunks)
    assert placed.shape == (engine.n_layers, 2, engine.kv_heads, total, engine.head_dim)
    second = slice(chunks[0].n_tokens, chunks[0].n_tokens + chunks[1].n_tokens)
    expected = rotate_keys(chunks[1].kv[:, 0], start + chunks[0].n_tokens, engine.inv_freq)
    torch.testing.assert_close(placed[:, 0, :, second], expected)
    torch.testing.assert_close(placed[:, 1, :, second], chunks[1].kv[:, 1])
    assert placed.data_ptr() != chunks[0].kv.data_ptr()  # a fresh tensor: stored KV is never written


def test_stack_unstack_round_trip():
    layers = [(torch.randn(1, 3, 5, 8), torch.randn(1, 3, 5, 8)) for _ in range(4)]
    stacked = stack_kv(layers)
    assert stacked.shape == (4, 2, 3, 5, 8)
    for (k, v), (k2, v2) in zip(layers, unstack_kv(stacked)):
        assert torch.equal(k, k2) and torch.equal(v, v2)
    assert check_prefix_kv(layers, 4, 3, 8) == 5


def test_check_prefix_kv_rejects_bad_shapes():
    good = [(torch.zeros(1, 3, 5, 8), torch.zeros(1, 3, 5, 8)) for _ in range(2)]
    for bad, n_layers in (
        (good, 3),  # layer count
        ([(torch.zeros(1, 2, 5, 8), torch.zeros(1, 2, 5, 8))] * 2, 2),  # heads
        ([good[0], (torch.zeros(1, 3, 4, 8), torch.zeros(1, 3, 4, 8))], 2),  # lengths disagree
    ):
        try:
            check_prefix_kv(bad, n_layers, 3, 8)
        except ValueError:
            continue
        raise AssertionError("accepted a malformed prefix_kv")


def test_causal_position_mask():
    mask = causal_position_mask(torch.tensor([2, 4]), 6, torch.float32)
    assert mask.shape == (1, 1, 2, 6)
    allowed = mask[0, 0] == 0
    assert allowed.tolist() == [[True, True, True, False, False, False], [True, True, True, True, True, False]]


def test_chunk_kv_shapes(engine, chunks):
    c = chunks[0]
    assert isinstance(c, ChunkKV)
    assert c.kv.shape == (engine.n_layers, 2, engine.kv_heads, c.n_tokens, engine.head_dim)
    assert c.kv.dtype == torch.float32 and c.token_ids.dtype == torch.long
    assert c.nbytes == c.kv.numel() * 4 + c.n_tokens * 8
