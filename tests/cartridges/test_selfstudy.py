"""Self-study data, batched decoding, and the train_cartridge job end to end (tiny sizes)."""

from __future__ import annotations

import json

import pytest
import torch

from app.inference.cartridge import Cartridge, read_metadata
from app.inference.context_distillation import DistillConfig
from app.inference.kv import prefix_cache, prefix_length
from app.kit.runtime.localmodel import decode
from pipelines.cartridges.chat import CHATML, context_ids, conversation_ids, encode, stop_ids
from pipelines.cartridges.selfstudy import SelfStudyConfig, SelfStudyMismatch, chunk_tokens, load_examples, run_selfstudy
from pipelines.cartridges.trainer import CartridgeJobConfig, train_cartridge

TINY = SelfStudyConfig(samples=4, chunk_tokens=24, batch_size=2, max_question_tokens=6, max_answer_tokens=5, top_k=20, seed=3)


def test_chunking_covers_the_stream_and_folds_a_short_tail():
    ids = list(range(100))
    chunks = chunk_tokens(ids, 32)
    assert [len(c) for c in chunks] == [32, 32, 36]  # tail of 4 < 16 joins the last chunk
    assert sum(chunks, []) == ids
    assert [len(c) for c in chunk_tokens(ids, 40)] == [40, 40, 20]


def test_batched_generation_matches_one_by_one(corpus, model, tokenizer):
    prefix_ids = context_ids(tokenizer, corpus[0])
    cart = Cartridge.from_tokens(model, prefix_ids, len(prefix_ids), model_id="m")
    prompts = [
        conversation_ids(tokenizer, q)[0]
        for q in ("Who leads Project Falcon?", "Budget?", "Where does Project Falcon launch, and when?")
    ]
    pre, p = cart.as_prefix_kv(), cart.p
    batched = decode(
        model,
        prefix_cache(pre, len(prompts)),
        prompts,
        start=prefix_length(pre),
        max_new_tokens=6,
        stop_ids=stop_ids(tokenizer),
        record_top_k=3,
    )
    for prompt, got in zip(prompts, batched):
        alone = decode(
            model, prefix_cache(pre), [prompt], start=p, max_new_tokens=6, stop_ids=stop_ids(tokenizer), record_top_k=3
        )[0]
        assert got.tokens == alone.tokens and len(got.tokens) >= 1
        torch.testing.assert_close(got.topk_logprobs, alone.topk_logprobs, atol=1e-4, rtol=1e-4)


def test_selfstudy_records_teacher_topk_and_resumes(corpus, model, tokenizer, tmp_path):
    body = encode(tokenizer, corpus[0] + " " + corpus[1])
    stats = run_selfstudy(model, tokenizer, body, tmp_path, TINY, model_id="m", progress=False)
    assert stats["shards"] == 2 and stats["resumed_samples"] == 0
    examples = load_examples(tmp_path)
    assert len(examples) == 4
    chunks = chunk_tokens(body, TINY.chunk_tokens)
    for _i, ex in enumerate(examples):
        answer = ex.conv_ids[ex.answer_start :]
        assert ex.topk_ids.shape == ex.topk_logprobs.shape == (answer.numel(), 20)
        assert 1 <= answer.numel() <= TINY.max_answer_tokens
        # greedy answers: each answer token is the teacher's top-1
        assert torch.equal(ex.topk_ids[:, 0], answer)
        assert (ex.topk_logprobs[:, :-1] >= ex.topk_logprobs[:, 1:]).all()
    # the recorded distribution is the teacher's: chunk in context + the conversation
    ex, chunk = examples[0], chunks[0]  # shard 0 uses chunk 0
    ctx = encode(tokenizer, CHATML.context_open) + chunk
    with torch.no_grad():
        logits = model(torch.tensor([ctx + ex.conv_ids.tolist()])).logits[0]
    rows = torch.arange(len(ctx) + ex.answer_start - 1, len(ctx) + ex.conv_ids.numel() - 1)
    lp = torch.log_softmax(logits[rows], -1).gather(-1, ex.topk_ids)
    torch.testing.assert_close(lp, ex.topk_logprobs, atol=1e-3, rtol=1e-3)
    lines = [json.loads(line) for line in (tmp_path / "shard-00001.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and {"seed_type", "question", "answer"} <= set(lines[0])

    # resume: drop one shard, rerun -> only that shard is regenerated, identically
    (tmp_path / "shard-00001.safetensors").unlink()
    again = run_selfstudy(model, tokenizer, body, tmp_path, TINY, model_id="m", progress=False)
    assert again["resumed_samples"] == 2
    for a, b in zip(examples, load_examples(tmp_path)):
        assert torch.equal(a.conv_ids, b.conv_ids) and torch.equal(a.topk_ids, b.topk_ids)

    with pytest.raises(SelfStudyMismatch):
        run_selfstudy(model, tokenizer, body[:-1], tmp_path, TINY, model_id="m", progress=False)


def test_train_cartridge_job_writes_a_versioned_file_and_resumes(corpus, model, tokenizer, tmp_path):
    cfg = CartridgeJobConfig(selfstudy=TINY, distill=DistillConfig(batch_size=2, checkpoint_every=1))
    path, stats = train_cartridge(
        corpus, ["sha256:a", "sha256:b"], tmp_path, p=8, steps=2, config=cfg, model=model, tokenizer=tokenizer, progress=False
    )
    assert path == tmp_path / "cartridge.safetensors" and path.exists()
    meta = read_metadata(path)
    assert json.loads(meta["content_hashes"]) == ["sha256:a", "sha256:b"] and meta["p"] == "8"
    cart = Cartridge.load(path)
    assert cart.stats["steps"] == 2 and cart.stats["selfstudy"]["samples"] == 4
    assert stats["kv_bytes_fp32"] == cart.nbytes() < stats["kv_bytes_corpus_in_context_fp32"]
    assert len(stats["losses"]) == 2 and stats["probe_loss_before"] > 0
    assert stats["cloze_examples"] == 8 and (tmp_path / "cloze.safetensors").exists()  # 2 sentences x 2 cuts per document
    # rerun with more steps: self-study is reused, distillation resumes from its checkpoint
    _, more = train_cartridge(
        corpus, ["sha256:a", "sha256:b"], tmp_path, p=8, steps=3, config=cfg, model=model, tokenizer=tokenizer, progress=False
    )
    assert more["selfstudy"]["resumed_samples"] == 4 and more["resumed_at_step"] == 2
    assert more["losses"][:2] == stats["losses"] and len(more["losses"]) == 3
    with pytest.raises(ValueError, match="one content hash"):
        train_cartridge(corpus, ["only-one"], tmp_path, p=8, steps=1, model=model, tokenizer=tokenizer)


def test_recital_examples_quote_the_corpus_with_the_teacher_scores(corpus, model, tokenizer):
    from pipelines.cartridges.selfstudy import recital_examples

    body = encode(tokenizer, corpus[0] + " " + corpus[1])
    exs = recital_examples(model, tokenizer, body, chunk=64, piece=16)
    assert len(exs) >= 3
    spans = []
    for ex in exs:
        answer = ex.conv_ids[ex.answer_start :].tolist()
        assert answer[-1] in stop_ids(tokenizer)  # the answer turn is closed
        spans.append(answer[:-1])
        assert ex.topk_ids.shape == (len(answer), 20)
    joined = sum(spans, [])
    assert all(tok in body for tok in joined) and spans[0] == body[:16]  # quotes of the corpus, in order
    # the teacher, with the passage in context, mostly predicts the quoted token itself
    hits = sum(
        int(ex.topk_ids[i, 0]) == int(ex.conv_ids[ex.answer_start + i]) for ex in exs for i in range(ex.topk_ids.shape[0] - 1)
    )
    total = sum(ex.topk_ids.shape[0] - 1 for ex in exs)
    assert hits / total > 0.5


def test_cloze_examples_ask_for_the_end_of_every_sentence(corpus, model, tokenizer):
    from pipelines.cartridges.selfstudy import cloze_examples

    exs = cloze_examples(model, tokenizer, corpus, chunk=30, cuts=(0.5,))  # one document per group
    # a document's first sentence is its title; every later sentence of >= 4 words is one gap
    assert len(exs) == 2 + 2
    first = tokenizer.decode(exs[0].conv_ids)
    assert "the notes on Project Falcon is led by Maria Chen: Its budget is 4.2 million euros and it ..." in first
    answer = exs[0].conv_ids[exs[0].answer_start :].tolist()  # 15 words, cut at 8
    assert tokenizer.decode(answer[:-1]).strip() == "launches on 14 March 2026 in Lisbon."
    assert answer[-1] in stop_ids(tokenizer) and exs[0].topk_ids.shape == (len(answer), 20)
    # the teacher has the document in context: it mostly predicts the sentence's own next token
    hits = sum(
        int(ex.topk_ids[i, 0]) == int(ex.conv_ids[ex.answer_start + i]) for ex in exs for i in range(ex.topk_ids.shape[0] - 1)
    )
    assert hits / sum(ex.topk_ids.shape[0] - 1 for ex in exs) > 0.5
