"""Measurements for one serving condition (a KV prefix in front of the question).

- generation accuracy: greedy answer (<= 24 tokens) contains an accepted answer string;
- multiple-choice accuracy: the true answer has the highest mean token log-prob among itself
  and three same-type distractors (chance = 25%);
- TTFT: cache build + prefill + first token, batch 1 (in-context prefills the corpus too);
- decode throughput at batch 1 and at the largest batch whose KV fits the memory cap.
"""

from __future__ import annotations

import re
import statistics
import time

import torch

from app.inference.cartridge import kv_bytes
from app.inference.kv import PrefixKV, prefix_cache, prefix_length, query_positions
from app.kit.runtime.localmodel import DecodeTimes, decode
from pipelines.cartridges.chat import conversation_ids, encode, stop_ids

from .corpus import Fact, PairQuestion

INSTRUCTION = "Answer in a few words."


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^a-z0-9. ]", " ", text.lower())).strip()


def is_correct(output: str, aliases: list[str]) -> bool:
    out = _norm(output)
    return any(_norm(a) in out for a in aliases)


def prompt_ids(tokenizer, question: str) -> list[int]:
    return conversation_ids(tokenizer, f"{question} {INSTRUCTION}")[0]


def kv_bytes_per_token(model) -> int:
    cfg = model.config
    return kv_bytes(
        cfg.num_hidden_layers, cfg.num_key_value_heads, getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads), 1
    )


def rows_fitting(model, tokens_per_row: int, cap_bytes: int, max_rows: int) -> int:
    return max(1, min(max_rows, cap_bytes // (tokens_per_row * kv_bytes_per_token(model))))


def generate(model, prefix: PrefixKV | None, prompts: list[list[int]], **kw):
    """The project's decode loop after ``prefix`` (built into a fresh cache for the batch)."""
    return decode(model, prefix_cache(prefix, len(prompts)), prompts, start=prefix_length(prefix), **kw)


def answers(
    model,
    tokenizer,
    prefix: PrefixKV | None,
    questions: list[str],
    *,
    cap_bytes: int,
    max_new_tokens: int = 24,
    max_rows: int = 32,
) -> list[str]:
    prompts = [prompt_ids(tokenizer, q) for q in questions]
    rows = rows_fitting(model, prefix_length(prefix) + 80 + max_new_tokens, cap_bytes, max_rows)
    outs: list[str] = []
    for i in range(0, len(prompts), rows):
        gens = generate(model, prefix, prompts[i : i + rows], max_new_tokens=max_new_tokens, stop_ids=stop_ids(tokenizer))
        outs += [tokenizer.decode(g.tokens, skip_special_tokens=True).strip() for g in gens]
    return outs


def generation_accuracy(model, tokenizer, prefix, facts: list[Fact], *, cap_bytes: int) -> dict:
    outs = answers(model, tokenizer, prefix, [f.question for f in facts], cap_bytes=cap_bytes)
    hits = [is_correct(o, f.aliases) for o, f in zip(outs, facts)]
    return {
        "accuracy": sum(hits) / len(hits),
        "n": len(hits),
        "examples": [{"q": f.question, "gold": f.answer, "out": o, "ok": h} for f, o, h in list(zip(facts, outs, hits))[:6]],
    }


def pair_accuracy(model, tokenizer, prefix, pairs: list[PairQuestion], *, cap_bytes: int) -> dict:
    outs = answers(model, tokenizer, prefix, [p.question for p in pairs], cap_bytes=cap_bytes, max_new_tokens=40)
    both = [is_correct(o, p.a.aliases) and is_correct(o, p.b.aliases) for o, p in zip(outs, pairs)]
    first = [is_correct(o, p.a.aliases) for o, p in zip(outs, pairs)]
    second = [is_correct(o, p.b.aliases) for o, p in zip(outs, pairs)]
    n = len(pairs)
    return {
        "both": sum(both) / n,
        "part_a_fact": sum(first) / n,
        "part_b_fact": sum(second) / n,
        "n": n,
        "examples": [{"q": p.question, "out": o} for p, o in list(zip(pairs, outs))[:3]],
    }


@torch.inference_mode()
def mc_accuracy(model, tokenizer, prefix, facts: list[Fact], *, cap_bytes: int) -> dict:
    """Pick the candidate with the highest mean log-prob; returns accuracy overall and per part."""
    rows_ids, rows_start, owners = [], [], []
    for qi, f in enumerate(facts):
        head = prompt_ids(tokenizer, f.question)
        for cand in [f.answer] + f.distractors:
            rows_ids.append(head + encode(tokenizer, cand))
            rows_start.append(len(head))
            owners.append(qi)
    longest = max(len(r) for r in rows_ids)
    per_forward = rows_fitting(model, prefix_length(prefix) + longest, cap_bytes, 64)
    scores = torch.empty(len(rows_ids))
    for i in range(0, len(rows_ids), per_forward):
        group = rows_ids[i : i + per_forward]
        T = max(len(r) for r in group)
        ids = torch.zeros((len(group), T), dtype=torch.long)
        for b, r in enumerate(group):
            ids[b, : len(r)] = torch.tensor(r)  # right padding: pads never precede real tokens
        logits = model(ids, cache=prefix_cache(prefix, len(group)), position_ids=query_positions(prefix, T, len(group))).logits
        logp = torch.log_softmax(logits.float(), -1)
        for b, r in enumerate(group):
            s = rows_start[i + b]
            tgt = torch.tensor(r[s:])
            scores[i + b] = logp[b, s - 1 : len(r) - 1].gather(-1, tgt[:, None]).mean()
    k = 1 + len(facts[0].distractors)
    picks = scores.view(len(facts), k).argmax(-1)  # the true answer is candidate 0
    hits = (picks == 0).tolist()
    by_part = {}
    for part in ("A", "B"):
        sel = [h for h, f in zip(hits, facts) if f.part == part]
        if sel:
            by_part[part] = sum(sel) / len(sel)
    per = scores.view(len(facts), k)
    gold_ll = per[:, 0]  # mean log-prob per token of the true answer
    # how far the true answer stands above the distractors (nats/token): MC's score with power,
    # and blind to a shift that moves every short answer alike (gold LL is not)
    margin = gold_ll - per[:, 1:].mean(-1)
    return {
        "accuracy": sum(hits) / len(hits),
        "by_part": by_part,
        "n": len(hits),
        "gold_ll": float(gold_ll.mean()),
        "margin": float(margin.mean()),
    }


def ttft_ms(model, prefix, prompt: list[int], repeats: int) -> float:
    """Median time to first token at batch 1 (cache from prefix + prefill of ``prompt``)."""
    times = []
    for _ in range(repeats):
        t, started = DecodeTimes(), time.perf_counter()
        generate(model, prefix, [prompt], max_new_tokens=1, times=t)
        times.append(t.first_token_at - started)
    return round(1000 * statistics.median(times), 1)


def decode_tokens_per_s(model, prefix, prompt: list[int], batch: int, steps: int) -> float:
    """Tokens per second over ``steps`` batched decode steps (no early stop)."""
    t = DecodeTimes()
    generate(model, prefix, [prompt] * batch, max_new_tokens=steps + 1, times=t)
    return round(batch * t.decode_steps / (t.finished_at - t.first_token_at), 2)


def serving_figures(
    model,
    tokenizer,
    prefix,
    question: str,
    *,
    context_in_prompt: list[int] | None,
    cap_bytes: int,
    max_batch: int,
    steps: int,
    repeats: int,
) -> dict:
    """TTFT and decode throughput. With ``context_in_prompt`` (the in-context condition) TTFT
    prefills those tokens with the question; decode then runs from the equivalent prefix."""
    prompt = prompt_ids(tokenizer, question)
    start = time.perf_counter()
    if context_in_prompt is None:
        ttft = ttft_ms(model, prefix, prompt, repeats)
    else:
        ttft = ttft_ms(model, None, context_in_prompt + prompt, repeats)
    tokens_per_row = prefix_length(prefix) + len(prompt) + steps + 1
    batch = rows_fitting(model, tokens_per_row, cap_bytes, max_batch)
    return {
        "ttft_ms": ttft,
        "decode_tok_s_b1": decode_tokens_per_s(model, prefix, prompt, 1, steps),
        "max_batch": batch,
        "kv_bytes_per_row": tokens_per_row * kv_bytes_per_token(model),
        "decode_tok_s_max_batch": decode_tokens_per_s(model, prefix, prompt, batch, steps),
        "measure_s": round(time.perf_counter() - start, 1),
    }
