"""Benchmark: CacheBlend vs full prefill, prefix caching and full KV reuse, side by side.

    .venv/bin/python -m bench.speed.inference_blend [--quick] [--examples N] [--threads T]

For every example (6-10 chunks of ~200-400 tokens + a question whose answer spans 2-3 chunks,
see dataset.py) all modes run back to back, in a rotating order, on the same loaded model, so
that load from other processes hits them alike; speed-ups are per-example ratios against the
same example's ``full`` run (median reported). Chunk KVs are precomputed into the chunk store
first (as the bootstrap pipeline would); TTFT runs from the start of the request (chunk lookup
in the store included) to the choice of the first token. ``blend@0.15/disk`` reads the chunk
KVs from the disk tier (RAM tier off). Results: a table on stdout and
``bench/results/inference_blend.json``.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from app.inference.blend import BlendConfig
from app.inference.engine import Engine, EngineConfig, config_from_env
from app.inference.store import ChunkStore, StoreConfig
from bench.command import parser, save
from bench.speed.inference_blend.dataset import build
from bench.speed.inference_blend.metrics import exact_match, f1, value_recall

# (label, mode, recompute_ratio, tier)
RUNS = [
    ("full", "full", 0.0, "mem"),
    ("prefix", "prefix", 0.0, "mem"),
    ("reuse", "reuse", 0.0, "mem"),
    ("blend@0.05", "blend", 0.05, "mem"),
    ("blend@0.15", "blend", 0.15, "mem"),
    ("blend@0.30", "blend", 0.30, "mem"),
    ("blend@0.15/disk", "blend", 0.15, "disk"),
]


def run_one(
    engine: Engine, store: ChunkStore, hashes: list[str], question: str, mode: str, ratio: float, max_tokens: int
) -> dict:
    t0 = time.perf_counter()
    chunks = [store.get(h) for h in hashes]  # RAM tier, or disk for the ram-less store
    g = engine.generate(question, chunks, mode=mode, blend=BlendConfig(recompute_ratio=ratio), max_tokens=max_tokens)
    return {
        "ttft_s": g.first_token_at - t0,
        "total_s": g.finished_at - t0,
        "text": g.text,
        "prompt_tokens": g.prompt_tokens,
        "recomputed_tokens": g.recomputed_tokens,
        "token_ids": g.token_ids,
        "first_logits": g.first_logits,
    }


def common_prefix(a: list[int], b: list[int]) -> int:
    """Number of leading generated tokens equal to full's (where the answers start to diverge)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> float:
    """KL(full || mode) of the first-token distributions."""
    p = torch.log_softmax(p_logits.double(), -1)
    q = torch.log_softmax(q_logits.double(), -1)
    return float((p.exp() * (p - q)).sum())


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "inference_blend")
    ap.add_argument("--quick", action="store_true", help="4 examples (a smoke run)")
    ap.add_argument("--examples", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the 2 cores here are shared)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    n_examples = 4 if args.quick else args.examples

    engine = Engine.load(EngineConfig(model_path=config_from_env().model_path, threads=args.threads))
    examples = build(n_examples, seed=args.seed)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="blend-bench-") as tmp:
        store = ChunkStore(engine, StoreConfig(root=Path(tmp)))
        disk_store = ChunkStore(engine, StoreConfig(root=Path(tmp), mem_bytes=0))
        t = time.perf_counter()
        hashes = [store.precompute(ex.chunks) for ex in examples]
        precompute_s = time.perf_counter() - t
        # warm-up (allocator, kernels) on the first example; not recorded
        run_one(engine, store, hashes[0], examples[0].question, "blend", 0.15, 2)
        records = []
        for i, (ex, hs) in enumerate(zip(examples, hashes)):
            order = RUNS[i % len(RUNS) :] + RUNS[: i % len(RUNS)]  # rotate who runs first
            results = {}
            for label, mode, ratio, tier in order:
                results[label] = run_one(
                    engine, disk_store if tier == "disk" else store, hs, ex.question, mode, ratio, args.max_tokens
                )
            full = results["full"]
            rec = {
                "id": ex.id,
                "question": ex.question,
                "gold": ex.gold,
                "n_chunks": len(ex.chunks),
                "chunk_tokens": [store.get(h).n_tokens for h in hs],
                "modes": {},
            }
            for label, r in results.items():
                rec["modes"][label] = {
                    "ttft_s": r["ttft_s"],
                    "total_s": r["total_s"],
                    "text": r["text"],
                    "prompt_tokens": r["prompt_tokens"],
                    "recomputed_tokens": r["recomputed_tokens"],
                    "f1": f1(r["text"], ex.gold),
                    "em": exact_match(r["text"], ex.gold),
                    "recall": value_recall(r["text"], ex.answers),
                    "same_as_full": r["text"].strip() == full["text"].strip(),
                    "f1_vs_full": f1(r["text"], full["text"]),
                    "common_prefix": common_prefix(r["token_ids"], full["token_ids"]),
                    "kl_first_token": kl(full["first_logits"], r["first_logits"]),
                    "speedup": full["ttft_s"] / r["ttft_s"],
                }
            records.append(rec)
            b = rec["modes"]["blend@0.15"]
            print(
                f"[{i + 1}/{n_examples}] {ex.id} {rec['modes']['full']['prompt_tokens']} tokens: "
                f"full {full['ttft_s']:.2f}s, blend@0.15 {b['ttft_s']:.2f}s (x{b['speedup']:.1f}), "
                f"F1 full {rec['modes']['full']['f1']:.2f} blend {b['f1']:.2f}",
                flush=True,
            )
    summary = summarise(records)
    out = {
        "benchmark": "inference_blend",
        "config": {
            "examples": n_examples,
            "seed": args.seed,
            "threads": args.threads,
            "max_tokens": args.max_tokens,
            "check_layer": BlendConfig().check_layer,
            "model_id": engine.model_id,
            "device": str(engine.device),
            "dtype": str(engine.dtype),
        },
        "machine": {
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "precompute_s": precompute_s,
        "summary": summary,
        "targets": targets(summary),
        "examples": records,
    }
    print_table(out)
    return save(args.out, out, indent=1)


def summarise(records: list[dict]) -> dict:
    full_f1 = statistics.mean(r["modes"]["full"]["f1"] for r in records)
    out = {}
    for label, *_ in RUNS:
        ms = [r["modes"][label] for r in records]
        out[label] = {
            "ttft_median_s": statistics.median(m["ttft_s"] for m in ms),
            "ttft_mean_s": statistics.mean(m["ttft_s"] for m in ms),
            "speedup_median": statistics.median(m["speedup"] for m in ms),
            "recomputed_share": statistics.mean(m["recomputed_tokens"] for m in ms)
            / statistics.mean(sum(r["chunk_tokens"]) for r in records),
            "f1": statistics.mean(m["f1"] for m in ms),
            "delta_f1": statistics.mean(m["f1"] for m in ms) - full_f1,
            "delta_f1_se": paired_se([m["f1"] - r["modes"]["full"]["f1"] for m, r in zip(ms, records)]),
            "em": statistics.mean(m["em"] for m in ms),
            "recall": statistics.mean(m["recall"] for m in ms),
            "agree_text": statistics.mean(m["same_as_full"] for m in ms),
            "f1_vs_full": statistics.mean(m["f1_vs_full"] for m in ms),
            "common_prefix_tokens": statistics.mean(m["common_prefix"] for m in ms),
            "kl_first_token": statistics.mean(m["kl_first_token"] for m in ms),
        }
    return out


def paired_se(diffs: list[float]) -> float:
    """Standard error of a mean paired difference: how much of dF1 is sampling noise."""
    return statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")


def targets(s: dict) -> dict:
    b, reuse = s["blend@0.15"], s["reuse"]
    return {
        "blend@0.15 speedup >= 3": b["speedup_median"] >= 3.0,
        "blend@0.15 |dF1| <= 0.02": abs(b["delta_f1"]) <= 0.02,
        # reuse further from full than blend@0.15 on every fidelity measure
        "reuse loses quality": reuse["delta_f1"] < b["delta_f1"]
        and reuse["f1_vs_full"] < b["f1_vs_full"]
        and reuse["kl_first_token"] > b["kl_first_token"]
        and reuse["common_prefix_tokens"] < b["common_prefix_tokens"],
    }


def print_table(out: dict) -> None:
    s = out["summary"]
    cols = ["ttft_med", "x_full", "recomp", "F1", "dF1", "±se", "EM", "recall", "=full", "F1~full", "prefix", "KL1"]
    print(
        f"\n{out['config']['examples']} examples, {out['config']['threads']} thread(s), "
        f"load avg {out['machine']['loadavg_before'][0]:.1f} -> {out['machine']['loadavg_after'][0]:.1f}"
    )
    print(f"{'mode':<16}" + "".join(f"{c:>9}" for c in cols))
    for label, m in s.items():
        vals = [
            f"{m['ttft_median_s']:.2f}s",
            f"{m['speedup_median']:.2f}",
            f"{m['recomputed_share']:.2f}",
            f"{m['f1']:.3f}",
            f"{m['delta_f1']:+.3f}",
            f"{m['delta_f1_se']:.3f}",
            f"{m['em']:.2f}",
            f"{m['recall']:.2f}",
            f"{m['agree_text']:.2f}",
            f"{m['f1_vs_full']:.2f}",
            f"{m['common_prefix_tokens']:.1f}",
            f"{m['kl_first_token']:.3f}",
        ]
        print(f"{label:<16}" + "".join(f"{v:>9}" for v in vals))
    print(
        "ttft_med: median TTFT; x_full: median per-example TTFT(full)/TTFT(mode); recomp: share of chunk tokens\n"
        "recomputed; F1/EM/recall vs gold (recall: share of gold values in the answer); dF1: F1 - F1(full),\n"
        "±se its paired standard error;\n"
        "=full: answer identical to full's; F1~full: token F1 against full's answer; prefix: leading tokens\n"
        "equal to full's answer; KL1: KL(full || mode) of the first-token distribution."
    )
    print("targets: " + ", ".join(f"{k}: {'met' if v else 'MISSED'}" for k, v in out["targets"].items()))


if __name__ == "__main__":
    main()
