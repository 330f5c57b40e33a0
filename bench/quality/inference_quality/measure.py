"""One (example, configuration) measurement, and the statistics over examples.

Per run, on the engine's own code path (``Engine.build_context`` then the query):
- ``ttft_s``: chunk lookup in the RAM store + context build + query prefill + first pick;
- ``ll``: teacher-forced log-likelihood of the gold answer, mean log-prob per answer token
  (the query is followed by the gold answer's tokens on the same cache);
- ``kl``: mean over the answer positions of KL(full prefill's next-token distribution || this
  run's), with full prefill's distributions from the same example (0 for full itself);
- ``f1``: token F1 of the greedy answer (≤ ``max_new`` tokens, decoded by the project's decode
  loop on the same context) against the gold answer.
Statistics: means with 95% t-intervals, and paired differences against full prefill.
"""

from __future__ import annotations

import math
import time

import torch

from app.inference.blend import BlendConfig
from app.kit.runtime.localmodel import decode
from bench.speed.inference_blend.metrics import f1 as f1_score


@torch.inference_mode()
def run(
    engine,
    store,
    hashes: list[str],
    q_ids: torch.Tensor,
    ans_ids: torch.Tensor,
    mode: str,
    config: BlendConfig,
    ref_logprobs: torch.Tensor | None,
    gold: str,
    max_new: int,
) -> dict:
    """``max_new=0``: no greedy answer (no F1), for the sweep, where decoding would cost more
    than the context build it measures."""
    t0 = time.perf_counter()
    chunks = [store.get(h) for h in hashes]
    ctx = engine.build_context(chunks, mode, config, query_ids=q_ids)
    first = engine.forward(q_ids, ctx.cache, ctx.n_tokens)  # (vocab,)
    int(torch.argmax(first))
    ttft = time.perf_counter() - t0
    # teacher forcing: the answer tokens after the query; logits at positions predicting them
    if ans_ids.numel() > 1:
        pos = torch.arange(ctx.n_tokens + q_ids.numel(), ctx.n_tokens + q_ids.numel() + ans_ids.numel() - 1)
        rest = engine.model(ans_ids[None, :-1], cache=ctx.cache, position_ids=pos[None], use_cache=True).logits[0]
        logits = torch.cat([first[None], rest.float()])  # (A, vocab)
    else:
        logits = first[None]
    logprobs = torch.log_softmax(logits.double(), -1)  # (A, vocab)
    ll = float(logprobs.gather(-1, ans_ids[:, None]).mean())
    kl = 0.0 if ref_logprobs is None else float((ref_logprobs.exp() * (ref_logprobs - logprobs)).sum(-1).mean())
    out = {"ttft_s": ttft, "ll": ll, "kl": kl, "recomputed": ctx.recomputed_tokens, "logprobs": logprobs}
    if not max_new:
        return out
    # greedy answer on the same context (the cache cropped back to the context)
    ctx.cache.crop(ctx.n_tokens - ctx.cache.get_seq_length())  # a negative count removes tokens
    (gen,) = decode(
        engine.model, ctx.cache, [q_ids.tolist()], start=ctx.n_tokens, max_new_tokens=max_new, stop_ids=engine.eos_ids
    )
    tokens = gen.tokens[:-1] if gen.stopped else gen.tokens
    text = engine.tokenizer.decode(tokens, skip_special_tokens=True).strip()
    return {**out, "f1": f1_score(text, gold), "text": text}


def t_quantile(n: int) -> float:
    try:
        from scipy.stats import t

        return float(t.ppf(0.975, n - 1))
    except ImportError:  # pragma: no cover - scipy ships with the test extras
        return 1.96


def mean_ci(xs: list[float]) -> dict:
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return {"mean": m, "ci95": float("nan"), "n": n}
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    return {"mean": m, "ci95": t_quantile(n) * sd / math.sqrt(n), "n": n}


def median(xs: list[float]) -> float:
    s = sorted(xs)
    k = len(s) // 2
    return s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2


def summarise(records: list[dict], labels: list[str]) -> dict:
    """Per configuration over the examples that ran it (and full): means, CIs, paired deltas."""
    out = {}
    for label in labels:
        rs = [r for r in records if label in r["runs"] and "full" in r["runs"]]
        if not rs:
            continue
        runs = [r["runs"][label] for r in rs]
        full = [r["runs"]["full"] for r in rs]
        out[label] = {
            "n": len(rs),
            "ttft_median_s": median([x["ttft_s"] for x in runs]),
            "speedup_median": median([f["ttft_s"] / x["ttft_s"] for x, f in zip(runs, full)]),
            "recomputed_share": sum(x["recomputed"] for x in runs) / sum(r["chunk_tokens"] for r in rs),
            "ll": mean_ci([x["ll"] for x in runs]),
            "delta_ll": mean_ci([x["ll"] - f["ll"] for x, f in zip(runs, full)]),
            "kl": mean_ci([x["kl"] for x in runs]),
        }
        if all("f1" in x for x in runs + full):
            out[label].update(
                {
                    "f1": mean_ci([x["f1"] for x in runs]),
                    "delta_f1": mean_ci([x["f1"] - f["f1"] for x, f in zip(runs, full)]),
                    "same_text": sum(x["text"] == f["text"] for x, f in zip(runs, full)) / len(rs),
                }
            )
    return out
