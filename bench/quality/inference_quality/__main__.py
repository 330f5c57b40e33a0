"""Benchmark: quality of CacheBlend token selections against full prefill, with statistical power.

    .venv/bin/python -m bench.quality.inference_quality --phase sweep   [--examples 20]
    .venv/bin/python -m bench.quality.inference_quality --phase confirm [--examples 200] [--shard 0/2]
    .venv/bin/python -m bench.quality.inference_quality --phase query   [--examples 200] [--shard 0/2]
    .venv/bin/python -m bench.quality.inference_quality --phase anchor  [--examples 200] [--shard 0/2]
    .venv/bin/python -m bench.quality.inference_quality --phase report
    .venv/bin/python -m bench.quality.inference_quality --quick          (2 examples, 3 configurations)

Examples: ``data.py`` (wiki + LoCoMo, ~2k-token contexts, interleaved). Per example every
configuration runs back to back on one loaded model (1 torch thread), in an order rotated per
example, so machine load hits them alike; speed-ups are per-example TTFT ratios against the same
example's full prefill (median). ``measure.py`` defines the metrics. Records are appended to a
JSONL file as each example finishes (a killed run keeps what it measured; a rerun resumes).

- ``sweep``: every selection variant over ratios 0.05-0.5 on the first examples -> the frontier;
- ``confirm``: full and the candidates for the default on the next examples (held out from the
  choice); ``report`` summarises both.
- ``query`` (round 3): the same held-out examples, the query-attention selection against EPIC 0.25
  (round 2's default), its layer count fixed by ``bench.research.inference_quality_pilot --round 3``.
- ``anchor`` (round 4): the same held-out examples with anchored chunk KV (computed behind the
  system segment, ``EngineConfig.anchor_chunks``); rounds 1-3 stored chunks computed alone, and
  their phases still do (a configuration's third element), so a rerun measures what they did.
  Paired with round 3's records of the same examples by ``--phase report`` (same code path for
  the configurations both ran; gold LL, KL and F1 are deterministic on one torch thread).
- ``reuse`` (round 4's control): every chunk reused unchanged with chunks computed alone, on the
  first 100 of those examples, joined with ``anchor``'s records by ``--phase report``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import torch

from app.inference.blend import BlendConfig
from app.inference.engine import Engine, EngineConfig, config_from_env
from app.inference.store import ChunkStore, StoreConfig
from bench.command import parser
from bench.common import ROOT
from bench.quality.inference_quality import measure
from bench.quality.inference_quality.data import build

DOCS = ROOT / "docs"  # the frontier plot
RATIOS = (0.05, 0.1, 0.15, 0.3)
SWEEP_EXAMPLES = 20  # the sweep's examples; confirm runs on the next ones (held out from the choice)


Config = tuple[str, BlendConfig, bool]  # engine mode, blend config, chunks anchored (False: computed alone)


def configs(phase: str) -> dict[str, Config]:
    """label -> (engine mode, blend config, anchored); 'full' first (the reference of the others)."""
    if phase == "reuse":  # round 4's control: every chunk reused unchanged, computed alone (paired with "anchor")
        return {"full": ("full", BlendConfig(), False), "reuse alone": ("reuse", BlendConfig(), False)}
    if phase in ("quick", "anchor"):
        c: dict[str, Config] = {"full": ("full", BlendConfig(), True)}
        if phase == "quick":
            c["default"] = ("blend", BlendConfig(), True)
            return c
        # round 4: the default's selection on anchored chunks; the same budget all on what the
        # query reads (anchoring removes the chunk-start sinks EPIC's half was spent on); reuse
        c["anchored epic+query 0.25"] = ("blend", BlendConfig(), True)
        c["anchored query 0.25"] = ("blend", BlendConfig(start_share=0.0), True)
        c["anchored reuse"] = ("reuse", BlendConfig(), True)
        return c
    return {label: (mode, cfg, False) for label, (mode, cfg) in _alone(phase).items()}


def _alone(phase: str) -> dict[str, tuple[str, BlendConfig]]:
    """Rounds 1-3 (chunk KV computed alone)."""
    c: dict[str, tuple[str, BlendConfig]] = {"full": ("full", BlendConfig())}
    if phase == "query":  # round 3: what the query reads, against round 2's default, paired
        # After 38 examples (19 per shard) query@8 0.15 (4.9x, KL 0.28 vs EPIC's 0.19) left and
        # half EPIC, half query at 0.25 joined (records say which ran): the query's picks fixed
        # the gold answer's likelihood on wiki but raised the KL, EPIC's chunk starts the reverse.
        c["epic 0.25"] = ("blend", BlendConfig(recompute_ratio=0.25, selection="chunk_start"))
        c["query@8 0.25"] = (
            "blend",
            BlendConfig(recompute_ratio=0.25, selection="query", query_layers=8, sink_tokens=1, start_share=0.0),
        )
        c["epic+query 0.25"] = (
            "blend",
            BlendConfig(recompute_ratio=0.25, selection="query", query_layers=8, start_share=0.5),
        )  # = BlendConfig() since round 3
        return c
    if phase == "confirm":  # the candidates for the default (chosen on the sweep's examples)
        # Second round: at 0.15 both selections lost ~0.3 nats/gold token on 21 held-out
        # examples; on 4 sweep examples EPIC at 0.25 kept ΔLL near 0 (-0.012) at 3.2x (bench.research.inference_quality_pilot).
        # After 16 held-out examples (15: ΔLL -0.26 ± 0.18) two more joined for the rest of the run
        # (records say which ran): deviation at the same ratio, and EPIC at 0.5 (the gap closes? below 3x)
        c["epic 0.25"] = ("blend", BlendConfig(recompute_ratio=0.25, selection="chunk_start"))
        c["dev@L1 0.25"] = ("blend", BlendConfig(recompute_ratio=0.25, selection="deviation", check_layer=1))
        c["epic 0.5"] = ("blend", BlendConfig(recompute_ratio=0.5, selection="chunk_start"))
        return c
    c["reuse"] = ("reuse", BlendConfig())
    for r in RATIOS:
        c[f"dev@L1 {r}"] = ("blend", BlendConfig(recompute_ratio=r, selection="deviation", check_layer=1))
        c[f"epic {r}"] = ("blend", BlendConfig(recompute_ratio=r, selection="chunk_start"))
    c["dev@L3 0.15"] = ("blend", BlendConfig(recompute_ratio=0.15, selection="deviation", check_layer=3))
    c["dev/chunk@L1 0.15"] = ("blend", BlendConfig(recompute_ratio=0.15, selection="deviation", per_chunk=True))
    c["dev+sink4@L1 0.15"] = ("blend", BlendConfig(recompute_ratio=0.15, selection="deviation", sink_tokens=4))
    c["adaptive@L1 0.7"] = ("blend", BlendConfig(recompute_ratio=0.5, selection="deviation", adaptive_mass=0.7))
    return c


def measure_examples(engine: Engine, examples, cfgs: dict[str, Config], out: Path, max_new: int) -> None:
    """``engine`` is loaded anchored; configurations on chunks computed alone get a second engine
    over the same model (and their own store: the two ``kv_id`` differ)."""
    labels = list(cfgs)
    needed = {anchored for mode, _, anchored in cfgs.values() if mode != "full"} or {True}
    engines = {
        a: engine if a else Engine(dataclasses.replace(engine.config, anchor_chunks=False), engine.model, engine.tokenizer)
        for a in needed
    }
    with tempfile_dir() as tmp, out.open("a") as f:
        # chunks stay stored across examples (LoCoMo questions share sessions), LRU-bounded
        stores = {
            a: ChunkStore(e, StoreConfig(root=Path(tmp), mem_bytes=3 * 2**29, disk_bytes=2**30)) for a, e in engines.items()
        }
        for i, ex in enumerate(examples):
            t_ex = time.perf_counter()
            hashes = {a: stores[a].precompute(ex.chunks) for a in needed}
            q_ids = engine.query_ids(ex.question)
            ans_ids = engine.encode(ex.gold)
            runs = {}
            a0 = min(needed)  # full prefill reads the chunks' token ids from either store
            full = measure.run(engine, stores[a0], hashes[a0], q_ids, ans_ids, "full", BlendConfig(), None, ex.gold, max_new)
            ref = full.pop("logprobs")
            runs["full"] = full
            others = labels[1:]
            k = i % len(others)
            for label in others[k:] + others[:k]:  # rotate who runs first
                mode, cfg, a = cfgs[label]
                r = measure.run(engines[a], stores[a], hashes[a], q_ids, ans_ids, mode, cfg, ref, ex.gold, max_new)
                r.pop("logprobs")
                runs[label] = r
            rec = {
                "id": ex.id,
                "corpus": ex.corpus,
                "question": ex.question,
                "gold": ex.gold,
                "n_chunks": len(ex.chunks),
                "chunk_tokens": sum(stores[a0].get(h).n_tokens for h in hashes[a0]),
                "answer_tokens": int(ans_ids.numel()),
                "loadavg": os.getloadavg()[0],
                "runs": runs,
            }
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(
                f"[{i + 1}/{len(examples)}] {ex.id} {rec['chunk_tokens']} tok, full {full['ttft_s']:.1f}s, "
                f"{time.perf_counter() - t_ex:.0f}s for {len(runs)} runs, load {rec['loadavg']:.1f}",
                flush=True,
            )


def tempfile_dir():
    import tempfile

    return tempfile.TemporaryDirectory(prefix="quality-bench-")


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def main(argv: list[str] | None = None) -> dict | None:
    ap = parser(__doc__, "inference_quality", folder=True)
    ap.add_argument("--phase", choices=("sweep", "confirm", "query", "anchor", "reuse", "report"), default="confirm")
    ap.add_argument("--quick", action="store_true", help="2 examples, full/reuse/default (a smoke run)")
    ap.add_argument("--examples", type=int, default=None, help="sweep: 20, confirm: 200")
    ap.add_argument(
        "--shard", default="0/1", help="confirm: run shard i of n (i/n) of the examples, e.g. 0/2 and 1/2 in two processes"
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-new", type=int, default=16, help="greedy answer length for F1 (the sweep: none)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    from bench.quality.inference_quality import report

    phase = "quick" if args.quick else args.phase
    if phase == "report":
        return report.write(args.out, DOCS)
    n = args.examples or {"quick": 2, "sweep": SWEEP_EXAMPLES, "confirm": 200, "query": 200, "anchor": 200, "reuse": 100}[phase]
    i, k = (int(x) for x in args.shard.split("/"))
    # the sweep takes the first examples; confirm the next n, held out from the choice of default
    first = SWEEP_EXAMPLES if phase in ("confirm", "query", "anchor", "reuse") else 0
    examples = build(first + n, seed=args.seed)[first:][i::k]
    out = args.out / (f"inference_quality_{phase}.jsonl" if k == 1 else f"inference_quality_{phase}.{i}of{k}.jsonl")
    args.out.mkdir(parents=True, exist_ok=True)
    if phase == "quick" and out.exists():
        out.unlink()
    done = len(load(out))
    engine = Engine.load(EngineConfig(model_path=config_from_env().model_path, threads=args.threads))
    torch.manual_seed(0)
    print(f"{phase}: {len(examples) - done} examples to run ({done} already in {out})", flush=True)
    measure_examples(engine, examples[done:], configs(phase), out, 0 if phase == "sweep" else args.max_new)
    if phase == "quick":
        return report.summary(load(out), list(configs("quick")))
    return None


if __name__ == "__main__":
    main()
