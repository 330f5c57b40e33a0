"""Context distillation: the frozen sink, loss going down, resumable checkpoints."""

from __future__ import annotations

import pytest
import torch

from app.inference.context_distillation import DistillConfig, DistillExample, batch_indices, distill_loss, evaluate_loss, train
from pipelines.cartridges.chat import context_ids, conversation_ids, corpus_text
from pipelines.cartridges.trainer import initial_cartridge

QA = [
    ("Who leads Project Falcon?", "Maria Chen leads Project Falcon."),
    ("What is the budget of Project Falcon?", "Its budget is 4.2 million euros."),
    ("Which extension does the Orion help desk use?", "Extension 4471."),
    ("Who approves travel above 800 euros?", "Ana Ruiz, the finance director."),
]


@pytest.fixture(scope="module")
def examples(corpus, model, tokenizer) -> list[DistillExample]:
    """Teacher = the model with the whole corpus in context; top-20 on each answer token."""
    ctx = context_ids(tokenizer, corpus_text(corpus))
    out = []
    for q, a in QA:
        conv, start = conversation_ids(tokenizer, q, a)
        with torch.no_grad():
            logits = model(torch.tensor([ctx + conv])).logits[0]
        # answer token conv[i] is predicted at absolute position len(ctx) + i - 1
        rows = torch.arange(len(ctx) + start - 1, len(ctx) + len(conv) - 1)
        lp, ids = torch.log_softmax(logits[rows], -1).topk(20, dim=-1)
        out.append(DistillExample(torch.tensor(conv), start, ids, lp))
    return out


def _snapshot(cart):
    return [(k.detach().clone(), v.detach().clone()) for k, v in zip(cart.keys, cart.values)]


def test_only_cartridge_learns_and_first_token_stays_frozen(model, tokenizer, examples):
    cart = initial_cartridge(model, tokenizer, ["unrelated"], 8, model_id="m", content_hashes=[], init="unrelated")
    before = _snapshot(cart)
    weight = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    stats = train(model, cart, examples, DistillConfig(steps=1, batch_size=2), progress=False)
    assert stats["steps"] == 1 and len(stats["losses"]) == 1
    moved = 0.0
    for (k0, v0), k, v in zip(before, cart.keys, cart.values):
        assert torch.equal(k[:, :1], k0[:, :1]) and torch.equal(v[:, :1], v0[:, :1])  # sink frozen
        moved += ((k[:, 1:] - k0[:, 1:]).abs().sum() + (v[:, 1:] - v0[:, 1:]).abs().sum()).item()
    assert moved > 0  # the rest of the prefix did learn
    assert torch.equal(model.model.layers[0].self_attn.q_proj.weight, weight)
    assert all(not p.requires_grad and p.grad is None for p in model.parameters())


def test_gradients_reach_every_layer_of_the_prefix(model, tokenizer, examples):
    cart = initial_cartridge(model, tokenizer, ["x"], 6, model_id="m", content_hashes=[], init="unrelated")
    loss, n = distill_loss(model, cart.as_prefix_kv(), examples[:2])
    loss.backward()
    assert n == sum(ex.topk_ids.shape[0] for ex in examples[:2])
    for k, v in zip(cart.keys, cart.values):
        assert k.grad is not None and v.grad is not None
        assert k.grad[:, 1:].abs().sum() > 0 and v.grad[:, 1:].abs().sum() > 0
        assert k.grad[:, 0].abs().sum() == 0 and v.grad[:, 0].abs().sum() == 0


def test_a_few_steps_reduce_the_distillation_loss(model, tokenizer, examples):
    cart = initial_cartridge(model, tokenizer, ["x"], 8, model_id="m", content_hashes=[], init="unrelated")
    before = evaluate_loss(model, cart.as_prefix_kv(), examples)
    stats = train(model, cart, examples, DistillConfig(steps=8, batch_size=4, lr=2e-2), progress=False)
    after = evaluate_loss(model, cart.as_prefix_kv(), examples)
    assert stats["steps"] == 8
    assert after < 0.85 * before, (before, after)


def test_checkpoint_resume_matches_an_uninterrupted_run(model, tokenizer, examples, tmp_path):
    def fresh():
        return initial_cartridge(model, tokenizer, ["x"], 6, model_id="m", content_hashes=[], init="unrelated")

    cfg = DistillConfig(steps=3, batch_size=2, checkpoint_every=1)
    straight = fresh()
    s_stats = train(model, straight, examples, cfg, progress=False)

    part = fresh()
    train(
        model, part, examples, DistillConfig(steps=2, batch_size=2, checkpoint_every=1), checkpoint_dir=tmp_path, progress=False
    )
    resumed = fresh()  # a new process would start from the initial cartridge again
    r_stats = train(model, resumed, examples, cfg, checkpoint_dir=tmp_path, progress=False)
    assert r_stats["resumed_at_step"] == 2 and r_stats["steps"] == 3
    assert r_stats["losses"][:2] == s_stats["losses"][:2] and len(r_stats["losses"]) == 3
    for a, b in zip(straight.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_batch_order_is_a_function_of_seed_and_step():
    seen = [i for s in range(3) for i in batch_indices(s, 5, 5, seed=1)]
    assert sorted(seen[:5]) == list(range(5)) and sorted(seen[5:10]) == list(range(5))
    assert batch_indices(7, 5, 3, seed=1) == batch_indices(7, 5, 3, seed=1)
    assert batch_indices(0, 50, 10, seed=1) != batch_indices(0, 50, 10, seed=2)


def test_relative_lr_moves_each_tensor_in_proportion_to_its_scale(model, tokenizer, examples):
    """One Adam step moves an element by ~lr; with relative_lr, by ~lr x the tensor's RMS, so the
    small layer-0 values (RMS ~0.04) move as little, relatively, as the large keys."""
    from app.inference.context_distillation import param_groups

    def relative_change(cfg):
        cart = initial_cartridge(model, tokenizer, ["x"], 8, model_id="m", content_hashes=[], init="unrelated")
        before = [p.detach().clone() for p in cart.parameters()]
        train(model, cart, examples[:2], cfg, progress=False)
        return [float((p.detach() - b)[:, 1:].norm() / b[:, 1:].norm()) for p, b in zip(cart.parameters(), before)]

    cart = initial_cartridge(model, tokenizer, ["x"], 8, model_id="m", content_hashes=[], init="unrelated")
    groups = param_groups(cart, DistillConfig(lr=1e-2, relative_lr=True))
    rms = [float(g["params"][0].detach()[:, 1:].pow(2).mean().sqrt()) for g in groups]
    assert [g["lr"] for g in groups] == pytest.approx([1e-2 * r for r in rms])
    absolute = relative_change(DistillConfig(steps=1, batch_size=2, lr=1e-2))
    relative = relative_change(DistillConfig(steps=1, batch_size=2, lr=1e-2, relative_lr=True))
    # absolute: the relative change spans the tensors' scale range; relative: it is nearly flat
    assert max(absolute) / min(absolute) > 10 * max(relative) / min(relative)
    assert max(relative) < 0.02
