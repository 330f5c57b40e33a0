"""Context distillation: train a cartridge so that model + cartridge imitates model + corpus.

Design choices
- Student = frozen model + cartridge prefix + conversation (no corpus); teacher = the same
  conversation after a corpus chunk, recorded offline by self-study as top-k log-probs per
  answer token. Loss = cross-entropy of the student against the teacher's top-k probabilities
  (unnormalised, so positions where the teacher is unsure weigh less) — KL up to the teacher's
  entropy, which is constant.
- Only the cartridge learns (Adam, lr 2e-3: the Cartridges reference's 2e-2 erased the
  initialisation within a few steps on CPU budgets, docs/cartridges.md); the model's
  parameters have ``requires_grad`` off, so backward computes activation gradients only.
- Right padding without an attention mask: under a causal mask a real token never attends to
  pads that come after it, so padded rows are exact. Logits are computed only at the answer
  positions (the vocabulary projection is the single largest matmul of a 135M model).
- Checkpoints are one safetensors file (cartridge + Adam moments + step, metadata in JSON);
  the batch order is a pure function of (seed, step), so a resumed run continues identically.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm import tqdm

from app.inference.cartridge import Cartridge
from app.inference.kv import PrefixKV, prefix_cache, query_positions

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.safetensors"


@dataclass
class DistillExample:
    conv_ids: torch.Tensor  # (T,) long: conversation tokens that follow the context
    answer_start: int  # conv_ids[answer_start:] are the answer tokens
    topk_ids: torch.Tensor  # (T - answer_start, k) long: teacher's top-k token ids
    topk_logprobs: torch.Tensor  # (T - answer_start, k) float: their log-probabilities

    def __post_init__(self):
        n = self.conv_ids.numel() - self.answer_start
        assert self.answer_start >= 1, "the answer must follow at least one token"
        assert self.topk_ids.shape == self.topk_logprobs.shape and self.topk_ids.shape[0] == n, (self.topk_ids.shape, n)


@dataclass(frozen=True)
class DistillConfig:
    steps: int = 200
    batch_size: int = 8
    # 2e-3 (docs/cartridges.md, the third training round): with fill-the-gap data
    # it lifts multiple choice and the gold-vs-distractor margin over the untrained cartridge in
    # 30 steps; 2e-2 lost on every score in every run
    lr: float = 2e-3
    checkpoint_every: int = 50
    seed: int = 0
    time_budget_s: float | None = None  # stop early (and say so in the stats) past this
    normalize_teacher: bool = False  # renormalise the teacher's top-k to sum to 1 (a KL over top-k)
    # lr relative to each K/V tensor's initial RMS (per layer, per K and V). The KV scale varies
    # ~40x across layers (SmolLM2: layer-0 values RMS ~0.04, last-layer values ~1.5, keys ~2);
    # Adam moves every element by ~lr per step whatever its scale, so one absolute lr wipes the
    # small tensors out in a few steps while barely moving the large ones.
    relative_lr: bool = False


def freeze(model: torch.nn.Module) -> None:
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)


def distill_loss(
    model, prefix_kv: PrefixKV, batch: list[DistillExample], normalize_teacher: bool = False
) -> tuple[torch.Tensor, int]:
    """Mean over answer tokens of ``-sum_k p_teacher(k) * log q_student(k)``; returns (loss, n).

    ``normalize_teacher``: p_teacher renormalised over its top-k (else the raw probabilities,
    which weigh positions where the teacher is unsure less)."""
    device = prefix_kv[0][0].device
    B, T = len(batch), max(ex.conv_ids.numel() for ex in batch)
    ids = torch.zeros((B, T), dtype=torch.long, device=device)  # right-padded
    rows, cols, top_ids, top_lps = [], [], [], []
    for b, ex in enumerate(batch):
        n = ex.conv_ids.numel()
        ids[b, :n] = ex.conv_ids
        # the answer token at index i is predicted from the hidden state at i - 1
        span = torch.arange(ex.answer_start - 1, n - 1, device=device)
        rows.append(torch.full_like(span, b))
        cols.append(span)
        top_ids.append(ex.topk_ids)
        top_lps.append(ex.topk_logprobs)
    hidden = model.get_decoder()(
        ids, cache=prefix_cache(prefix_kv, B), use_cache=True, position_ids=query_positions(prefix_kv, T, B, device)
    ).last_hidden_state  # (B, T, hidden)
    picked = hidden[torch.cat(rows), torch.cat(cols)]  # (N, hidden)
    logprobs = torch.log_softmax(model.get_output_embeddings()(picked).float(), dim=-1)
    student = logprobs.gather(-1, torch.cat(top_ids).to(device).long())  # (N, k)
    teacher_lp = torch.cat(top_lps).to(device).float()  # (N, k)
    teacher = torch.softmax(teacher_lp, -1) if normalize_teacher else teacher_lp.exp()
    loss = -(teacher * student).sum(-1).mean()
    return loss, picked.shape[0]


@torch.no_grad()
def evaluate_loss(model, prefix_kv: PrefixKV, examples: list[DistillExample], batch_size: int = 8) -> float:
    """Token-weighted distillation loss over ``examples`` (no gradients)."""
    total, count = 0.0, 0
    for i in range(0, len(examples), batch_size):
        loss, n = distill_loss(model, prefix_kv, examples[i : i + batch_size])
        total += float(loss) * n
        count += n
    return total / max(count, 1)


def param_groups(cartridge: Cartridge, config: DistillConfig) -> list[dict]:
    """One Adam group per K/V tensor: lr, or lr x the tensor's RMS (sink excluded) when relative."""
    groups = []
    for param in cartridge.parameters():
        lr = config.lr
        if config.relative_lr:
            body = param.detach()[:, cartridge.frozen_tokens :]
            lr = config.lr * float(body.pow(2).mean().sqrt()) if body.numel() else config.lr
        groups.append({"params": [param], "lr": lr})
    return groups


def batch_indices(step: int, n_examples: int, batch_size: int, seed: int) -> list[int]:
    """Example indices of ``step``: epochs are seeded permutations, batches cut across them."""
    out: list[int] = []
    start = step * batch_size
    while len(out) < batch_size:
        epoch, offset = divmod(start + len(out), n_examples)
        perm = torch.randperm(n_examples, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        out.extend(perm[offset : offset + batch_size - len(out)].tolist())
    return out


def train(
    model,
    cartridge: Cartridge,
    examples: list[DistillExample],
    config: DistillConfig = DistillConfig(),
    *,
    checkpoint_dir: str | Path | None = None,
    progress: bool = True,
    check: Callable[[], None] | None = None,
) -> dict:
    """Optimise ``cartridge`` in place; resume from ``checkpoint_dir`` when it holds a checkpoint.
    ``check`` is called before every step and may raise to abandon the run (a cancelled job)."""
    if not examples:
        raise ValueError("no distillation examples")
    freeze(model)
    cartridge.train()
    optim = torch.optim.Adam(param_groups(cartridge, config), lr=config.lr)
    step, losses, elapsed = 0, [], 0.0
    ckpt = Path(checkpoint_dir) / CHECKPOINT_NAME if checkpoint_dir else None
    if ckpt is not None and ckpt.exists():
        step, losses, elapsed = load_checkpoint(ckpt, cartridge, optim)
        log.info("resumed distillation at step %d from %s", step, ckpt)
    started, resumed_at, stopped_early = time.perf_counter() - elapsed, step, False
    tokens = 0
    bar = tqdm(total=config.steps, initial=step, desc=f"distill p={cartridge.p}", disable=not progress, leave=False)
    while step < config.steps:
        if check is not None:
            check()
        if config.time_budget_s is not None and time.perf_counter() - started > config.time_budget_s:
            stopped_early = True
            break
        batch = [examples[i] for i in batch_indices(step, len(examples), config.batch_size, config.seed)]
        loss, n = distill_loss(model, cartridge.as_prefix_kv(), batch, config.normalize_teacher)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()
        step += 1
        tokens += n
        losses.append(round(loss.item(), 5))
        bar.update(1)
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        if ckpt is not None and (step % config.checkpoint_every == 0 or step == config.steps):
            save_checkpoint(ckpt, cartridge, optim, step, losses=losses, elapsed=time.perf_counter() - started, config=config)
    bar.close()
    cartridge.eval()
    head = losses[: max(1, min(5, len(losses)))]
    tail = losses[-max(1, min(5, len(losses))) :]
    return {
        "steps": step,
        "resumed_at_step": resumed_at,
        "stopped_early": stopped_early,
        "examples": len(examples),
        "answer_tokens_this_run": tokens,
        "loss_first5": sum(head) / len(head) if losses else None,
        "loss_last5": sum(tail) / len(tail) if losses else None,
        "losses": losses,
        "train_seconds": round(time.perf_counter() - started, 2),
        "config": asdict(config),
    }


def save_checkpoint(
    path: Path,
    cartridge: Cartridge,
    optim: torch.optim.Optimizer,
    step: int,
    *,
    losses: list[float],
    elapsed: float,
    config: DistillConfig,
) -> None:
    tensors = {}
    for i, (k, v) in enumerate(zip(cartridge.keys, cartridge.values)):
        tensors[f"layers.{i}.keys"] = k.detach().contiguous().cpu()
        tensors[f"layers.{i}.values"] = v.detach().contiguous().cpu()
    for j, param in enumerate(cartridge.parameters()):
        state = optim.state.get(param, {})
        for name in ("exp_avg", "exp_avg_sq", "step"):
            if name in state:
                tensors[f"adam.{j}.{name}"] = torch.as_tensor(state[name]).detach().contiguous().cpu()
    meta = {
        "step": str(step),
        "losses": json.dumps(losses),
        "elapsed": str(elapsed),
        "config": json.dumps(asdict(config)),
        "p": str(cartridge.p),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata=meta)
    tmp.replace(path)


def load_checkpoint(path: Path, cartridge: Cartridge, optim: torch.optim.Optimizer) -> tuple[int, list[float], float]:
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        if int(meta["p"]) != cartridge.p:
            raise ValueError(f"checkpoint {path} is for p={meta['p']}, cartridge has p={cartridge.p}")
        names = set(f.keys())
        with torch.no_grad():
            for i, (k, v) in enumerate(zip(cartridge.keys, cartridge.values)):
                k.copy_(f.get_tensor(f"layers.{i}.keys"))
                v.copy_(f.get_tensor(f"layers.{i}.values"))
        for j, param in enumerate(cartridge.parameters()):
            if f"adam.{j}.step" in names:
                optim.state[param] = {name: f.get_tensor(f"adam.{j}.{name}") for name in ("step", "exp_avg", "exp_avg_sq")}
    return int(meta["step"]), json.loads(meta["losses"]), float(meta["elapsed"])
