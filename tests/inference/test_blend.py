"""CacheBlend against the reference path (plain prefill), on the real SmolLM2 weights."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from app.inference.blend import BlendConfig, n_recompute, planned_recompute

QUESTION = "Who discovered the comet with the green tail, and where does she work?"


def _context_kv(engine, chunks, mode, ratio=0.15, prefix_kv=None, selection="chunk_start"):
    ctx = engine.build_context(
        chunks, mode, BlendConfig(recompute_ratio=ratio, selection=selection), prefix_kv, query_ids=engine.query_ids(QUESTION)
    )
    keys = torch.stack([layer.keys[0] for layer in ctx.cache.layers])  # (L, H, N, D)
    values = torch.stack([layer.values[0] for layer in ctx.cache.layers])
    return ctx, keys, values


def test_blend_at_ratio_one_equals_full_prefill(engine, chunks):
    full = engine.generate(QUESTION, chunks, mode="full", max_tokens=1)
    blend = engine.generate(QUESTION, chunks, mode="blend", blend=BlendConfig(recompute_ratio=1.0), max_tokens=1)
    assert blend.recomputed_tokens == sum(c.n_tokens for c in chunks) == full.recomputed_tokens
    torch.testing.assert_close(blend.first_logits, full.first_logits, rtol=1e-4, atol=1e-3)
    # the context KV itself, layer by layer
    _, k_full, v_full = _context_kv(engine, chunks, "full")
    _, k_blend, v_blend = _context_kv(engine, chunks, "blend", ratio=1.0)
    torch.testing.assert_close(k_blend, k_full, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(v_blend, v_full, rtol=1e-4, atol=1e-4)


def test_full_mode_equals_one_plain_forward_pass(engine, chunks):
    """`full` (segment by segment with a cache) == the model run once over the whole prompt."""
    ids = torch.cat([engine.system_ids, *[c.token_ids for c in chunks], engine.query_ids(QUESTION)])
    with torch.inference_mode():
        ref = engine.model(ids[None]).logits[0, -1].float()
    got = engine.generate(QUESTION, chunks, mode="full", max_tokens=1)
    assert got.prompt_tokens == ids.numel()
    torch.testing.assert_close(got.first_logits, ref, rtol=1e-4, atol=1e-3)


def test_prefix_kv_sits_in_front_of_everything(engine, chunks):
    """The cartridge contract: prefix_kv at 0..p-1, the prompt continuing at p, in every mode."""
    pre_ids = engine.encode("Background: the Plimton observatory stands on Mount Fell.")
    cache = engine.new_cache()
    engine.forward(pre_ids, cache, 0)
    prefix_kv = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    ids = torch.cat([pre_ids, engine.system_ids, *[c.token_ids for c in chunks], engine.query_ids(QUESTION)])
    with torch.inference_mode():
        ref = engine.model(ids[None]).logits[0, -1].float()
    full = engine.generate(QUESTION, chunks, mode="full", prefix_kv=prefix_kv, max_tokens=1)
    blend = engine.generate(
        QUESTION, chunks, mode="blend", blend=BlendConfig(recompute_ratio=1.0), prefix_kv=prefix_kv, max_tokens=1
    )
    assert full.prefix_tokens == blend.prefix_tokens == pre_ids.numel()
    torch.testing.assert_close(full.first_logits, ref, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(blend.first_logits, ref, rtol=1e-4, atol=1e-3)
    # the caller's tensors are not modified (the engine copies them into its cache)
    assert prefix_kv[0][0].shape[2] == pre_ids.numel()


def test_partial_recompute_sits_between_reuse_and_full(engine, chunks):
    """Recomputing the highest-deviation tokens moves the KV towards full prefill."""
    _, k_full, v_full = _context_kv(engine, chunks, "full")
    errors = {}
    for selection in ("chunk_start", "deviation", "query"):
        for mode, ratio in (("reuse", 0.0), ("blend", 0.15), ("blend", 0.5)):
            ctx, k, v = _context_kv(engine, chunks, mode, ratio, selection=selection)
            errors[(mode, ratio)] = ((k - k_full).pow(2).sum() + (v - v_full).pow(2).sum()).item()
        assert errors[("reuse", 0.0)] > 0
        assert errors[("blend", 0.5)] < errors[("blend", 0.15)] < errors[("reuse", 0.0)], selection


def test_recomputed_token_counts_per_mode(engine, chunks):
    n = [c.n_tokens for c in chunks]
    counts = {}
    for mode in ("full", "prefix", "reuse", "blend"):
        ctx, *_ = _context_kv(engine, chunks, mode, ratio=0.15)
        assert ctx.n_tokens == engine.system_ids.numel() + sum(n)
        counts[mode] = ctx.recomputed_tokens
    assert counts == {
        "full": sum(n),
        "prefix": sum(n[1:]),
        "reuse": 0,
        "blend": sum(n_recompute(t, 0.15) for t in n),
    }  # EPIC (_context_kv's selection), per chunk
    assert counts["blend"] == planned_recompute(n, BlendConfig(recompute_ratio=0.15, selection="chunk_start"))
    # the default (half on chunk starts, half by the query's attention): the global budget
    default = engine.build_context(chunks, "blend", BlendConfig(recompute_ratio=0.15), query_ids=engine.query_ids(QUESTION))
    assert default.recomputed_tokens == n_recompute(sum(n), 0.15) == planned_recompute(n, BlendConfig(recompute_ratio=0.15))
    dev = _context_kv(engine, chunks, "blend", ratio=0.15, selection="deviation")[0].recomputed_tokens
    assert dev == n_recompute(sum(n), 0.15) == planned_recompute(n, BlendConfig(recompute_ratio=0.15, selection="deviation"))
    assert n_recompute(100, 0.15) == 15 and n_recompute(7, 0.15) == 2 and n_recompute(10, 0.0) == 0


def test_blend_ratio_zero_equals_reuse_after_the_check_layer(engine, chunks):
    _, k_reuse, _ = _context_kv(engine, chunks, "reuse")
    _, k_zero, _ = _context_kv(engine, chunks, "blend", ratio=0.0, selection="deviation")
    cfg = BlendConfig(selection="deviation")
    # EPIC at ratio 0 recomputes nothing at all: it is reuse
    _, k_epic0, _ = _context_kv(engine, chunks, "blend", ratio=0.0, selection="chunk_start")
    torch.testing.assert_close(k_epic0, k_reuse)
    # layers after the check layer keep the re-rotated stored KV; up to it, everything is recomputed
    torch.testing.assert_close(k_zero[cfg.check_layer + 1 :], k_reuse[cfg.check_layer + 1 :])
    assert not torch.allclose(k_zero[cfg.check_layer], k_reuse[cfg.check_layer], atol=1e-3)


def test_generation_from_blended_state_is_deterministic(engine, chunks):
    runs = [engine.generate(QUESTION, chunks, mode="blend", max_tokens=12) for _ in range(2)]
    assert runs[0].token_ids == runs[1].token_ids and len(runs[0].token_ids) > 0
    assert runs[0].text == runs[1].text and runs[0].text.strip()
    assert torch.equal(runs[0].first_logits, runs[1].first_logits)
    assert runs[0].first_token_at <= runs[0].finished_at


def test_blend_config_validation():
    with pytest.raises(ValueError):
        BlendConfig(check_layer=0)
    with pytest.raises(ValueError):
        BlendConfig(recompute_ratio=1.5)


@pytest.mark.parametrize(
    "cfg",
    [
        BlendConfig(recompute_ratio=1.0, selection="chunk_start"),
        BlendConfig(recompute_ratio=1.0, selection="deviation", per_chunk=True),
        BlendConfig(recompute_ratio=1.0, selection="deviation", check_layer=3, sink_tokens=2),
        BlendConfig(recompute_ratio=1.0, selection="query", start_share=0.0),
        BlendConfig(recompute_ratio=1.0),  # the default: half chunk starts, half by the query
    ],
)
def test_every_selection_at_ratio_one_equals_full_prefill(engine, chunks, cfg):
    full = engine.build_context(chunks, "full")
    got = engine.build_context(chunks, "blend", cfg, query_ids=engine.query_ids(QUESTION))
    assert got.recomputed_tokens == sum(c.n_tokens for c in chunks)
    for a, b in zip(got.cache.layers, full.cache.layers):
        torch.testing.assert_close(a.keys, b.keys, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(a.values, b.values, rtol=1e-4, atol=1e-4)


def test_selection_budgets(engine, chunks):
    from app.inference.blend import chunk_starts, select_top

    n = [c.n_tokens for c in chunks]
    T = sum(n)
    # EPIC: the first ceil(ratio * T_i) tokens of every chunk, and nothing else
    idx = chunk_starts(chunks, 0.2).tolist()
    bounds = [sum(n[:i]) for i in range(len(n))]
    assert idx == [b + j for b, t in zip(bounds, n) for j in range(n_recompute(t, 0.2))]
    assert engine.build_context(
        chunks, "blend", BlendConfig(recompute_ratio=0.2, selection="chunk_start")
    ).recomputed_tokens == len(idx)
    dev = torch.rand(T, generator=torch.Generator().manual_seed(0))
    # per chunk: each chunk gets its own share
    sel = select_top(dev, chunks, BlendConfig(recompute_ratio=0.2, selection="deviation", per_chunk=True))
    for b, t in zip(bounds, n):
        assert int(((sel >= b) & (sel < b + t)).sum()) == n_recompute(t, 0.2)
    # sink tokens are always in, within the global budget
    sel = select_top(dev, chunks, BlendConfig(recompute_ratio=0.2, selection="deviation", sink_tokens=2)).tolist()
    assert all(b in sel and b + 1 in sel for b in bounds) and len(sel) == n_recompute(T, 0.2)
    # adaptive: the fewest highest-deviation tokens that carry the mass, capped by the budget
    peaked = torch.full((T,), 1e-6)
    peaked[[3, 17]] = 1.0
    sel = select_top(peaked, chunks, BlendConfig(recompute_ratio=0.5, selection="deviation", adaptive_mass=0.9)).tolist()
    assert sel == [3, 17]
    capped = select_top(dev, chunks, BlendConfig(recompute_ratio=0.1, selection="deviation", adaptive_mass=0.99))
    assert capped.numel() == n_recompute(T, 0.1)
    with pytest.raises(ValueError):
        BlendConfig(selection="random")
    with pytest.raises(ValueError):
        BlendConfig(adaptive_mass=0.0)


def test_query_attention_equals_the_models_own_attention(engine, chunks):
    """The query's attention mass over a span, computed over a stored KV without writing into it,
    equals what the model's eager attention gives for the same prompt run in one pass."""
    from app.inference.blend import query_attention

    ctx = engine.build_context(chunks, "full")
    full = [(layer.keys, layer.values) for layer in ctx.cache.layers]
    before = full[0][0].clone()
    q_ids = engine.query_ids(QUESTION)
    N, n_layers = ctx.n_tokens, 4
    span = (int(engine.system_ids.numel()), N)
    got = query_attention(engine.model, full, q_ids, span, n_layers)
    assert torch.equal(full[0][0], before) and full[0][0].shape[2] == N  # nothing written into the KV
    ids = torch.cat([engine.system_ids, *[c.token_ids for c in chunks], q_ids])
    previous = engine.model.config._attn_implementation
    engine.model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            out = engine.model(ids[None], output_attentions=True)
    finally:
        engine.model.set_attn_implementation(previous)
    ref = sum(a[0, :, N:, span[0] : span[1]].float().sum(dim=(0, 1)) for a in out.attentions[:n_layers])
    torch.testing.assert_close(got, ref, rtol=1e-3, atol=1e-3)


def test_query_selection_spends_the_budget_on_what_the_query_reads(engine, chunks):
    from app.inference.blend import query_attention, select_top

    n = [c.n_tokens for c in chunks]
    cfg = BlendConfig(recompute_ratio=0.2, selection="query", sink_tokens=1, start_share=0.0)
    q_ids = engine.query_ids(QUESTION)
    ctx = engine.build_context(chunks, "blend", cfg, query_ids=q_ids)
    assert ctx.recomputed_tokens == n_recompute(sum(n), 0.2) == planned_recompute(n, cfg)
    with pytest.raises(ValueError, match="query"):
        engine.build_context(chunks, "blend", cfg)  # the query is needed
    with pytest.raises(ValueError):
        BlendConfig(selection="query", query_layers=0)
    with pytest.raises(ValueError):
        BlendConfig(selection="query", start_share=1.5)
    # EPIC's share first: the first ceil(start_share * ratio * T_i) tokens of every chunk, the rest by attention
    mixed = BlendConfig(recompute_ratio=0.2, selection="query", start_share=0.5)
    picked = select_top(torch.rand(sum(n), generator=torch.Generator().manual_seed(1)), chunks, mixed).tolist()
    starts = [b + j for b, t in zip([sum(n[:i]) for i in range(len(n))], n) for j in range(n_recompute(t, 0.1))]
    assert set(starts) <= set(picked) and len(picked) == n_recompute(sum(n), 0.2) == planned_recompute(n, mixed)
    # the selected tokens carry more of the query's attention (over reused KV) than any other
    # set of the same size could: they are its top, with every chunk's first token forced in
    reuse = engine.build_context(chunks, "reuse")
    P = int(engine.system_ids.numel())
    mass = query_attention(
        engine.model, [(la.keys, la.values) for la in reuse.cache.layers], q_ids, (P, reuse.n_tokens), cfg.query_layers
    )
    sel = select_top(mass, chunks, cfg)
    bounds = [sum(n[:i]) for i in range(len(n))]
    assert all(b in sel.tolist() for b in bounds)
    rest = torch.ones(sum(n), dtype=torch.bool)
    rest[sel] = False
    free = sel[~torch.isin(sel, torch.tensor(bounds))]
    assert float(mass[free].min()) >= float(mass[rest].max())


def test_anchored_chunk_kv_is_what_full_prefill_computes_behind_the_system_segment(engine, engine_alone, chunks, texts):
    """Chunk KV is computed behind the system segment (the default): the first chunk's stored KV,
    placed after the system prompt, is exactly full prefill's KV of those tokens ("prefix" mode
    is then a real prefix-cache hit), and reusing every chunk is much closer to full prefill than
    with chunks computed alone (whose first tokens become attention sinks)."""
    from app.inference.engine import Engine

    assert engine.config.anchor_chunks and engine.anchor_kv is not None
    S, T0 = int(engine.system_ids.numel()), chunks[0].n_tokens
    full = engine.build_context(chunks, "full")
    prefix = engine.build_context(chunks, "prefix")
    for a, b in zip(prefix.cache.layers, full.cache.layers):
        torch.testing.assert_close(a.keys[:, :, S : S + T0], b.keys[:, :, S : S + T0], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(a.values[:, :, S : S + T0], b.values[:, :, S : S + T0], rtol=1e-4, atol=1e-4)
    # the stored KV keeps the canonical layout: keys at positions 0..T-1 (the anchor is not stored)
    assert chunks[0].kv.shape[3] == T0
    alone = engine_alone
    assert alone.anchor_kv is None and alone.kv_id != engine.kv_id and engine.kv_id.startswith(alone.kv_id + "-a")
    other = Engine(dataclasses.replace(engine.config, system_prompt="Answer in French."), engine.model, engine.tokenizer)
    assert other.kv_id not in (engine.kv_id, alone.kv_id)  # KV behind another system prompt is never mixed in
    alone_chunks = [alone.encode_chunk(t) for t in texts]
    assert not torch.allclose(alone_chunks[0].kv[1:], chunks[0].kv[1:], atol=1e-3)  # layer 0 sees no context

    def error(eng, cs):
        ctx = eng.build_context(cs, "reuse")
        return sum(
            float((a.keys - b.keys).pow(2).sum() + (a.values - b.values).pow(2).sum())
            for a, b in zip(ctx.cache.layers, full.cache.layers)
        )

    assert error(engine, chunks) < 0.5 * error(alone, alone_chunks)
