"""Cartridges vs. in-context: accuracy, KV bytes, TTFT and throughput with the local model.

.venv/bin/python -m bench.speed.inference_cartridges [--quick] [--threads N]
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _pct(x: float | None) -> str:
    return "  -  " if x is None else f"{100 * x:5.1f}"


def _mb(n: int) -> str:
    return f"{n / 1e6:8.2f}"


def render(r: dict) -> str:
    plan = r["plan"]
    lines = [
        f"Cartridges on {r['model']} (CPU, {r['threads']} thread(s)); mode={plan['mode']}",
        f"corpus: {r['documents']} documents, {r['corpus_tokens']} tokens; {r['questions']} questions "
        f"(+{r['pair_questions']} two-part); KV fp32 = {r['kv_bytes_per_token_fp32']} B/token; "
        f"memory cap for batching = {r['memory_cap_bytes'] / 2**30:.2f} GiB, batch <= {plan['max_batch']}",
        f"training: self-study {r['selfstudy_seconds']:.0f}s + distillation, total "
        f"{r['train_seconds_total']:.0f}s (budget {plan['train_budget_s']:.0f}s); whole run {r['total_seconds']:.0f}s",
        "",
        f"{'condition':38s} {'prefix':>6s} {'KV MB':>8s} {'x less':>6s} {'gen%':>5s} {'MC%':>5s} "
        f"{'TTFT ms':>8s} {'tok/s@1':>8s} {'batch':>5s} {'tok/s@B':>8s}",
    ]
    for label, c in r["conditions"].items():
        s = c.get("serving")
        red = c["kv_reduction_vs_in_context"]
        lines.append(
            f"{label:38s} {c['prefix_tokens']:6d} {_mb(c['kv_bytes'])} {('' if red is None else f'{red:.1f}'):>6s} "
            f"{_pct(c['gen']['accuracy'])} {_pct(c['mc']['accuracy'])} "
            + (
                f"{s['ttft_ms']:8.0f} {s['decode_tok_s_b1']:8.1f} {s['max_batch']:5d} {s['decode_tok_s_max_batch']:8.1f}"
                if s
                else f"{'':8s} {'':8s} {'':5s} {'':8s}"
            )
        )
    lines += ["", "training (steps, seconds, distillation loss on an 8-example training probe before -> after):"]
    for name, t in r["training"].items():
        lines.append(
            f"  {name:14s} steps {t['steps']:3d}{' (cut by budget)' if t['stopped_early'] else ''}"
            f"  {t['train_seconds']:6.0f}s  loss {t['probe_loss_before']:.3f} -> {t['probe_loss_after']:.3f}"
        )
    lines += [
        "",
        "composition (two-part questions: both facts in the answer; MC accuracy on single questions by part):",
        f"{'condition':38s} {'prefix':>6s} {'KV MB':>8s} {'both%':>6s} {'A-fact%':>7s} "
        f"{'B-fact%':>7s} {'MC A%':>6s} {'MC B%':>6s}",
    ]
    for label, c in r["composition"].items():
        lines.append(
            f"{label:38s} {c['prefix_tokens']:6d} {_mb(c['kv_bytes'])} {_pct(c['both']):>6s} "
            f"{_pct(c['part_a_fact']):>7s} {_pct(c['part_b_fact']):>7s} "
            f"{_pct(c['mc_by_part'].get('A')):>6s} {_pct(c['mc_by_part'].get('B')):>6s}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    from bench.command import parser, save
    from bench.common import RESULTS

    from .run import QUICK, BenchPlan, run

    ap = parser(__doc__, None)
    ap.add_argument("--quick", action="store_true", help="small plan: a few minutes, 20 questions")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (oversubscribed OpenMP is much slower)")
    ap.add_argument("--resume", action="store_true", help="reuse self-study shards and checkpoints of a killed run")
    ap.add_argument(
        "--work", type=Path, default=None, help="scratch folder (default .memscale/bench/inference_cartridges/<mode>)"
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the JSON result (default bench/results/inference_cartridges.json, _quick with --quick)",
    )
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    plan = QUICK if a.quick else BenchPlan()
    work = a.work or Path(".memscale/bench/inference_cartridges") / plan.mode
    results = run(plan, work, threads=a.threads, resume=a.resume)
    name = "inference_cartridges" if plan.mode == "full" else f"inference_cartridges_{plan.mode}"
    print(render(results))
    return save(a.out or RESULTS / f"{name}.json", results)


if __name__ == "__main__":
    main()
