"""Cartridge tensors: equivalence with in-context tokens, storage, composition."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from transformers import DynamicCache

from app.inference.cartridge import (
    FORMAT_VERSION,
    Cartridge,
    CartridgeDirectory,
    CartridgeFormatError,
    compose,
    kv_bytes,
    read_metadata,
)
from app.inference.kv import prefix_cache, query_positions
from pipelines.cartridges.chat import context_ids, conversation_ids, corpus_text


def _logits_after(model, prefix_kv, ids: list[int]) -> torch.Tensor:
    x = torch.tensor([ids])
    with torch.no_grad():
        return model(x, cache=prefix_cache(prefix_kv), position_ids=query_positions(prefix_kv, len(ids))).logits[0]


def test_cartridge_from_first_p_tokens_equals_those_tokens_in_context(corpus, model, tokenizer):
    ctx = context_ids(tokenizer, corpus_text(corpus))
    p = 24
    cart = Cartridge.from_tokens(model, ctx, p, model_id="smol")
    assert (cart.num_layers, cart.kv_heads, cart.p, cart.head_dim) == (30, 3, p, 64)
    assert cart.keys[0].shape == (3, p, 64) and isinstance(cart.keys[0], torch.nn.Parameter)
    query, _ = conversation_ids(tokenizer, "Who leads Project Falcon?")
    with torch.no_grad():
        full = model(torch.tensor([ctx[:p] + query])).logits[0, p:]  # corpus tokens in the prompt
    via_cartridge = _logits_after(model, cart.as_prefix_kv(), query)
    assert via_cartridge.shape == full.shape == (len(query), model.config.vocab_size)
    torch.testing.assert_close(via_cartridge, full, atol=2e-4, rtol=1e-4)
    assert torch.equal(via_cartridge.argmax(-1), full.argmax(-1))
    # and it is not trivially equal to having no context at all
    no_ctx = _logits_after(model, None, query)
    assert (no_ctx - full).abs().max() > 1.0


def test_save_load_round_trip_keeps_tensors_and_metadata(corpus, model, tokenizer, tmp_path):
    ctx = context_ids(tokenizer, corpus[0])
    cart = Cartridge.from_tokens(model, ctx, 10, model_id="smollm2-135m-instruct", content_hashes=["sha256:aa", "sha256:bb"])
    cart.stats = {"steps": 3, "loss_last5": 0.5}
    path = cart.save(tmp_path / "c" / "cart.safetensors")
    raw = path.read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    assert raw[8:9] == b"{" and json.loads(raw[8 : 8 + header_len])["__metadata__"]["format"] == "memscale.cartridge"

    meta = read_metadata(path)
    assert meta["format_version"] == str(FORMAT_VERSION) and meta["p"] == "10"
    assert meta["model_id"] == "smollm2-135m-instruct"
    assert json.loads(meta["content_hashes"]) == ["sha256:aa", "sha256:bb"]

    back = Cartridge.load(path)
    assert (back.p, back.model_id, back.content_hashes, back.init, back.frozen_tokens) == (
        10,
        "smollm2-135m-instruct",
        ["sha256:aa", "sha256:bb"],
        "corpus",
        1,
    )
    assert back.stats == {"steps": 3, "loss_last5": 0.5}
    for a, b in zip(cart.as_prefix_kv(), back.as_prefix_kv()):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert back.nbytes() == kv_bytes(30, 3, 64, 10) == 2 * 30 * 3 * 64 * 10 * 4


def test_load_refuses_other_formats_and_versions(corpus, model, tokenizer, tmp_path):
    cart = Cartridge.from_tokens(model, context_ids(tokenizer, corpus[0]), 4, model_id="m")
    path = cart.save(tmp_path / "ok.safetensors")
    meta = read_metadata(path)
    tensors = {f"layers.{i}.{n}": torch.zeros(3, 4, 64) for i in range(30) for n in ("keys", "values")}
    save_file(tensors, str(tmp_path / "v99.safetensors"), metadata={**meta, "format_version": "99"})
    save_file(tensors, str(tmp_path / "other.safetensors"), metadata={"format": "something"})
    with pytest.raises(CartridgeFormatError, match="version 99"):
        Cartridge.load(tmp_path / "v99.safetensors")
    with pytest.raises(CartridgeFormatError, match="not a cartridge"):
        Cartridge.load(tmp_path / "other.safetensors")


def test_compose_concatenates_along_tokens_and_queries_continue(corpus, model, tokenizer):
    ctx = context_ids(tokenizer, corpus_text(corpus))
    c1 = Cartridge.from_tokens(model, ctx, 8, model_id="m")
    c2 = Cartridge.from_tokens(model, context_ids(tokenizer, corpus[1]), 12, model_id="m")
    pre = compose([c1, c2])
    assert len(pre) == 30
    for i, (k, v) in enumerate(pre):
        assert k.shape == v.shape == (1, 3, 20, 64)
        assert torch.equal(k[0, :, :8], c1.keys[i]) and torch.equal(k[0, :, 8:], c2.keys[i])
        assert torch.equal(v[0, :, :8], c1.values[i]) and torch.equal(v[0, :, 8:], c2.values[i])
    assert query_positions(pre, 5).tolist() == [[20, 21, 22, 23, 24]]
    cache = prefix_cache(pre, batch_size=2)
    assert cache.get_seq_length() == 20 and cache.layers[0].keys.shape == (2, 3, 20, 64)


def test_composed_slices_of_one_context_equal_the_whole_context(corpus, model, tokenizer):
    """Composition semantics: prefix A at 0..7 + prefix B (keys at 8..19) == 20 tokens in context."""
    ctx = context_ids(tokenizer, corpus_text(corpus))[:20]
    cache = DynamicCache()
    with torch.no_grad():
        model(torch.tensor([ctx]), cache=cache, use_cache=True)
    head = Cartridge(
        [layer.keys[0, :, :8] for layer in cache.layers], [layer.values[0, :, :8] for layer in cache.layers], model_id="m"
    )
    tail = Cartridge(
        [layer.keys[0, :, 8:] for layer in cache.layers], [layer.values[0, :, 8:] for layer in cache.layers], model_id="m"
    )
    whole = Cartridge.from_tokens(model, ctx, 20, model_id="m")
    query, _ = conversation_ids(tokenizer, "Where does Project Falcon launch?")
    composed = _logits_after(model, compose([head, tail]), query)
    torch.testing.assert_close(composed, _logits_after(model, whole.as_prefix_kv(), query), atol=2e-4, rtol=1e-4)


def test_compose_refuses_cartridges_of_different_models(corpus, model, tokenizer):
    ctx = context_ids(tokenizer, corpus[0])
    a = Cartridge.from_tokens(model, ctx, 4, model_id="smol-a")
    b = Cartridge.from_tokens(model, ctx, 4, model_id="smol-b")
    with pytest.raises(ValueError, match="different models"):
        compose([a, b])
    with pytest.raises(ValueError, match="at least p"):
        Cartridge.from_tokens(model, ctx[:3], 4, model_id="m")


def test_directory_resolver_composes_ids_in_order_and_refuses_unknown_ones(corpus, model, tokenizer, tmp_path):
    ctx = context_ids(tokenizer, corpus_text(corpus))
    a = Cartridge.from_tokens(model, ctx, 5, model_id="smol")
    b = Cartridge.from_tokens(model, context_ids(tokenizer, corpus[1]), 7, model_id="smol")
    a.save(tmp_path / "org1-a.safetensors")
    b.save(tmp_path / "org1-b" / "cartridge.safetensors")  # the layout train_cartridge writes
    Cartridge.from_tokens(model, ctx, 3, model_id="other-model").save(tmp_path / "alien.safetensors")
    resolve = CartridgeDirectory(tmp_path, model_id="smol")
    pre = resolve(["org1-b", "org1-a"])
    assert pre[0][0].shape == (1, 3, 12, 64) and not pre[0][0].requires_grad
    assert torch.equal(pre[3][1][0, :, :7], b.values[3]) and torch.equal(pre[3][1][0, :, 7:], a.values[3])
    for bad in ("missing", "../org1-a", ".hidden", "org1-a/../org1-b"):
        with pytest.raises(KeyError):
            resolve([bad])
    with pytest.raises(ValueError, match="other-model"):
        resolve(["alien"])
