"""The cartridge benchmark: in-context vs cartridges (p = 64, 256, 512) vs no context, plus
composition of two part cartridges, on a generated org corpus. See docs/cartridges.md."""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from app.inference.cartridge import compose
from app.inference.context_distillation import DistillConfig, evaluate_loss, train
from app.inference.kv import compute_kv
from app.kit.runtime.localmodel import LOCAL_MODEL_ID, load_causal_lm, local_model_dir
from pipelines.cartridges.chat import context_ids, corpus_text
from pipelines.cartridges.selfstudy import SelfStudyConfig
from pipelines.cartridges.trainer import CartridgeJobConfig, initial_cartridge, training_examples

from . import evaluate as ev
from .corpus import build_corpus, pair_questions, sample_questions

log = logging.getLogger(__name__)
GiB = 1 << 30


@dataclass(frozen=True)
class BenchPlan:
    mode: str = "full"
    questions: int = 60
    pairs: int = 20
    ps: tuple[int, ...] = (64, 256, 512)
    steps: int = 30  # distillation steps per full-corpus cartridge
    compose_p: int = 128  # each part cartridge; composed = 2 x compose_p tokens
    compose_steps: int = 20
    batch_size: int = 8
    # the service's recipe (CartridgeJobConfig, DistillConfig defaults: self-study + fill-the-gap,
    # lr 2e-3, the teacher sees the whole part), with fewer self-study samples to fit the budget.
    selfstudy: SelfStudyConfig = field(
        default_factory=lambda: SelfStudyConfig(samples=48, batch_size=16, max_question_tokens=32, max_answer_tokens=64)
    )
    cloze: bool = CartridgeJobConfig().cloze
    lr: float = DistillConfig().lr
    # self-study + fill-the-gap data + all five distillations; steps are cut to fit. 30 min (the CPU
    # budget, here for all five cartridges at once): the service's recipe needs ~7 min of data and
    # ~22 of steps on one thread
    train_budget_s: float = 30 * 60
    cap_bytes: int = GiB  # KV memory cap for the largest batch
    max_batch: int = 64
    decode_steps: int = 16
    ttft_repeats: int = 3


QUICK = BenchPlan(
    mode="quick",
    questions=12,
    pairs=4,
    steps=4,
    compose_steps=3,
    batch_size=4,
    selfstudy=SelfStudyConfig(samples=6, batch_size=6, max_question_tokens=24, max_answer_tokens=32),
    # 6 minutes: the fill-the-gap data over the whole corpus alone takes ~3-4 (one thread)
    train_budget_s=6 * 60,
    max_batch=16,
    decode_steps=4,
    ttft_repeats=1,
)


class Budget:
    """Spreads what is left of the training budget over the distillation runs still to come."""

    def __init__(self, total_s: float):
        self.deadline = time.perf_counter() + total_s

    def share(self, runs_left: int) -> float:
        return max(0.0, (self.deadline - time.perf_counter()) / max(runs_left, 1))


def _train(model, cart, examples, steps, batch, lr, budget_s, work: Path, name: str) -> dict:
    probe = examples[:: max(1, len(examples) // 8)][:8]  # spread over the training data: a fit measure, not held-out
    before = evaluate_loss(model, cart.as_prefix_kv(), probe)
    stats = train(
        model,
        cart,
        examples,
        DistillConfig(steps=steps, batch_size=batch, lr=lr, checkpoint_every=10, time_budget_s=budget_s),
        checkpoint_dir=work / "ckpt" / name,
    )
    stats["probe_loss_before"] = round(before, 4)
    stats["probe_loss_after"] = round(evaluate_loss(model, cart.as_prefix_kv(), probe), 4)
    stats["budget_s"] = round(budget_s, 1)
    cart.stats = {k: v for k, v in stats.items() if k != "losses"}
    cart.save(work / f"{name}.safetensors")
    log.info(
        "%s: %d steps in %.0fs, probe loss %.3f -> %.3f",
        name,
        stats["steps"],
        stats["train_seconds"],
        before,
        stats["probe_loss_after"],
    )
    return stats


def run(plan: BenchPlan, work: Path, threads: int, resume: bool = False) -> dict:
    torch.set_num_threads(threads)
    if work.exists() and not resume:
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model, tok = load_causal_lm(local_model_dir(".memscale"))
    corpus = build_corpus()
    facts = sample_questions(corpus, plan.questions)
    pairs = pair_questions(corpus, plan.pairs)
    full_ctx = context_ids(tok, corpus_text(corpus.texts))
    per_tok = ev.kv_bytes_per_token(model)
    results: dict = {
        "plan": asdict(plan),
        "threads": threads,
        "model": LOCAL_MODEL_ID,
        "corpus_tokens": len(full_ctx),
        "documents": len(corpus.texts),
        "questions": len(facts),
        "pair_questions": len(pairs),
        "kv_bytes_per_token_fp32": per_tok,
        "memory_cap_bytes": plan.cap_bytes,
        "conditions": {},
        "composition": {},
        "training": {},
    }

    # -- self-study, once per part (chunks never straddle the two parts) ---------------------
    budget = Budget(plan.train_budget_s)
    t_ss = time.perf_counter()
    parts = {"A": corpus.part_a, "B": corpus.part_b}
    examples = {}
    for name, texts in parts.items():
        examples[name], _, n_cloze = training_examples(
            model, tok, texts, work / f"part_{name}", plan.selfstudy, cloze=plan.cloze, model_id=LOCAL_MODEL_ID, progress=False
        )
        results[f"training_examples_{name}"] = {"selfstudy": len(examples[name]) - n_cloze, "cloze": n_cloze}
    results["selfstudy_seconds"] = round(time.perf_counter() - t_ss, 1)
    both = examples["A"] + examples["B"]

    # -- distillation ---------------------------------------------------------------------
    carts, inits = {}, {}
    runs = [(f"p{p}", p, corpus.texts, both, plan.steps) for p in plan.ps] + [
        (f"part{n}_p{plan.compose_p}", plan.compose_p, parts[n], examples[n], plan.compose_steps) for n in ("A", "B")
    ]
    for i, (name, p, texts, exs, steps) in enumerate(runs):
        cart = initial_cartridge(model, tok, texts, p, model_id=LOCAL_MODEL_ID, content_hashes=[f"bench:{name}"])
        inits[name] = [(k.detach().clone(), v.detach().clone()) for k, v in cart.as_prefix_kv()]
        stats = _train(model, cart, exs, steps, plan.batch_size, plan.lr, budget.share(len(runs) - i), work, name)
        results["training"][name] = stats
        carts[name] = cart
    results["train_seconds_total"] = round(time.perf_counter() - t_ss, 1)

    # -- accuracy per condition ------------------------------------------------------------
    with torch.inference_mode():
        header = compute_kv(model, torch.tensor(context_ids(tok, "")))
        full_prefix = compute_kv(model, torch.tensor(full_ctx))
        trained = {n: c.as_prefix_kv() for n, c in carts.items()}
        composed = compose([carts[f"partA_p{plan.compose_p}"], carts[f"partB_p{plan.compose_p}"]])
    conditions = {"no context": (header, 0), "in-context": (full_prefix, len(full_ctx))}
    for p in plan.ps:
        conditions[f"cartridge p={p} (init, untrained)"] = (inits[f"p{p}"], p)
        conditions[f"cartridge p={p}"] = (trained[f"p{p}"], p)
    conditions[f"composed A+B p={plan.compose_p}+{plan.compose_p}"] = (composed, 2 * plan.compose_p)

    for label, (prefix, tokens) in conditions.items():
        t = time.perf_counter()
        row = {
            "prefix_tokens": tokens,
            "kv_bytes": tokens * per_tok,
            "kv_reduction_vs_in_context": round(len(full_ctx) / tokens, 2) if tokens else None,
        }
        row["gen"] = ev.generation_accuracy(model, tok, prefix, facts, cap_bytes=plan.cap_bytes)
        row["mc"] = ev.mc_accuracy(model, tok, prefix, facts, cap_bytes=plan.cap_bytes)
        row["eval_s"] = round(time.perf_counter() - t, 1)
        results["conditions"][label] = row
        log.info("%s: gen %.2f mc %.2f (%.0fs)", label, row["gen"]["accuracy"], row["mc"]["accuracy"], row["eval_s"])

    # -- serving figures ------------------------------------------------------------------
    q = facts[0].question
    serving = {"no context": (header, None), "in-context": (full_prefix, full_ctx)}
    serving.update({f"cartridge p={p}": (trained[f"p{p}"], None) for p in plan.ps})
    for label, (prefix, in_prompt) in serving.items():
        results["conditions"][label]["serving"] = ev.serving_figures(
            model,
            tok,
            prefix,
            q,
            context_in_prompt=in_prompt,
            cap_bytes=plan.cap_bytes,
            max_batch=plan.max_batch,
            steps=plan.decode_steps,
            repeats=plan.ttft_repeats,
        )

    # -- composition on questions that need both parts ------------------------------------
    composed_label = f"composed A+B p={plan.compose_p}+{plan.compose_p}"
    comp = {  # label: (prefix, tokens, condition whose MC scores to reuse)
        "in-context (A+B)": (full_prefix, len(full_ctx), "in-context"),
        f"cartridge p={max(plan.ps)} (full corpus)": (trained[f"p{max(plan.ps)}"], max(plan.ps), f"cartridge p={max(plan.ps)}"),
        f"part A only p={plan.compose_p}": (trained[f"partA_p{plan.compose_p}"], plan.compose_p, None),
        f"part B only p={plan.compose_p}": (trained[f"partB_p{plan.compose_p}"], plan.compose_p, None),
        composed_label: (composed, 2 * plan.compose_p, composed_label),
    }
    for label, (prefix, tokens, reuse) in comp.items():
        row = ev.pair_accuracy(model, tok, prefix, pairs, cap_bytes=plan.cap_bytes)
        mc = results["conditions"][reuse]["mc"] if reuse else ev.mc_accuracy(model, tok, prefix, facts, cap_bytes=plan.cap_bytes)
        row["mc_by_part"] = mc["by_part"]
        row["prefix_tokens"], row["kv_bytes"] = tokens, tokens * per_tok
        results["composition"][label] = row
    results["total_seconds"] = round(time.perf_counter() - t0, 1)
    return results
