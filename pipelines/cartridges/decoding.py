"""Batched sampling after a KV prefix (corpus chunk, cartridge, composed cartridges or none).

Design choices
- Prompts of different lengths share one batch: each is left-padded *after* the prefix, the pad
  slots are masked out of attention (2-D mask over prefix + prompt) and position ids skip them,
  so every row sees exactly ``prefix + its prompt`` at positions ``P..P+n-1`` — the same logits
  as running it alone (tested).
- The prefix is expanded to the batch once; rows that hit a stop token leave the batch
  (``batch_select_indices``), so short answers stop costing compute.
- Optionally records the top-k log-probabilities (temperature 1) of the distribution each
  token was drawn from: the teacher signal of self-study, at no extra forward pass.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch

from app.inference.cartridge import PrefixKV, prefix_cache, prefix_length


@dataclass
class Generation:
    tokens: list[int]  # generated ids, including the stop token when one was produced
    topk_ids: torch.Tensor | None = None  # (len(tokens), k) int32
    topk_logprobs: torch.Tensor | None = None  # (len(tokens), k) float32


@torch.inference_mode()
def generate(
    model,
    prefix_kv: PrefixKV | None,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    stop_ids: Collection[int] = (),
    temperature: float = 0.0,
    record_top_k: int = 0,
    generator: torch.Generator | None = None,
    pad_id: int = 0,
    timings: dict | None = None,
) -> list[Generation]:
    """Greedy (``temperature=0``) or sampled continuation of each prompt after ``prefix_kv``.

    ``timings``, when given, receives ``first_token_s`` (cache build + prefill + first pick),
    ``decode_s`` and ``decode_steps`` (the batched steps after the first token).
    """
    t_start = time.perf_counter()
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("need at least one non-empty prompt")
    device = next(model.parameters()).device
    B, P = len(prompts), prefix_length(prefix_kv)
    lens = torch.tensor([len(p) for p in prompts], device=device)
    L = int(lens.max())
    ids = torch.full((B, L), pad_id, dtype=torch.long, device=device)
    mask = torch.ones((B, P + L), dtype=torch.long, device=device)
    pos = torch.full((B, L), P, dtype=torch.long, device=device)
    for b, prompt in enumerate(prompts):
        n = len(prompt)
        ids[b, L - n:] = torch.as_tensor(prompt, device=device)
        mask[b, P:P + L - n] = 0
        pos[b, L - n:] = torch.arange(P, P + n, device=device)

    cache = prefix_cache(prefix_kv, B)
    logits = model(ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True,
                   logits_to_keep=1).logits[:, -1]  # (B, vocab)
    stops = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
    out_tokens: list[list[int]] = [[] for _ in range(B)]
    out_ids: list[list[torch.Tensor]] = [[] for _ in range(B)]
    out_lps: list[list[torch.Tensor]] = [[] for _ in range(B)]
    active = torch.arange(B, device=device)  # original row of each live batch row
    next_pos = P + lens
    t_first, decode_steps = None, 0
    for step in range(max_new_tokens):
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        if temperature > 0:
            probs = torch.softmax(logits.float() / temperature, dim=-1)
            tok = torch.multinomial(probs, 1, generator=generator)[:, 0]
        else:
            tok = logprobs.argmax(-1)
        if record_top_k:
            top_lp, top_id = logprobs.topk(record_top_k, dim=-1)
        for j, row in enumerate(active.tolist()):
            out_tokens[row].append(int(tok[j]))
            if record_top_k:
                out_ids[row].append(top_id[j].to(torch.int32))
                out_lps[row].append(top_lp[j])
        if t_first is None:
            t_first = time.perf_counter()
        finished = torch.isin(tok, stops) if stops.numel() else torch.zeros_like(tok, dtype=torch.bool)
        if step == max_new_tokens - 1 or bool(finished.all()):
            break
        keep = (~finished).nonzero()[:, 0]
        if keep.numel() < active.numel():
            for layer in cache.layers:
                layer.batch_select_indices(keep)
            active, tok, mask, next_pos = active[keep], tok[keep], mask[keep], next_pos[keep]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        logits = model(tok[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                       cache=cache, use_cache=True).logits[:, -1]
        next_pos = next_pos + 1
        decode_steps += 1

    if timings is not None:
        t_end = time.perf_counter()
        timings.update(first_token_s=t_first - t_start, decode_s=t_end - t_first,
                       decode_steps=decode_steps)
    results = []
    for row in range(B):
        if record_top_k:
            results.append(Generation(out_tokens[row], torch.stack(out_ids[row]),
                                      torch.stack(out_lps[row])))
        else:
            results.append(Generation(out_tokens[row]))
    return results
