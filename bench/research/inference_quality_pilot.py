"""Pilot: a few sweep examples, the candidates for the default, no greedy decoding.

    .venv/bin/python -m bench.research.inference_quality_pilot [--examples 4] [--round 2|3]

Prints, per example and overall, each configuration's TTFT speed-up over full prefill (median of
per-example ratios), ΔLL of the gold answer vs full and the KL to full over the answer tokens.
It chose the ratio that ``--phase confirm`` then measures on the held-out examples; it writes no file.
Round 2 compared ratios of EPIC; round 3 the query-attention selection (its layer count, its ratio)
against EPIC 0.25, the default it would replace.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from app.inference.blend import BlendConfig
from app.inference.engine import Engine, EngineConfig, config_from_env
from app.inference.store import ChunkStore, StoreConfig
from bench.command import parser
from bench.quality.inference_quality import measure
from bench.quality.inference_quality.data import build

ROUNDS = {
    2: {
        "reuse": ("reuse", BlendConfig()),
        **{f"epic {r}": ("blend", BlendConfig(recompute_ratio=r)) for r in (0.15, 0.25, 0.3, 0.5)},
        "dev@L1 0.3": ("blend", BlendConfig(recompute_ratio=0.3, selection="deviation")),
    },
    3: {
        "epic 0.25": ("blend", BlendConfig(recompute_ratio=0.25)),
        **{
            f"query@{n} 0.25": (
                "blend",
                BlendConfig(recompute_ratio=0.25, selection="query", query_layers=n, sink_tokens=1, start_share=0.0),
            )
            for n in (4, 8, 15)
        },
        "query@8 0.15": (
            "blend",
            BlendConfig(recompute_ratio=0.15, selection="query", query_layers=8, sink_tokens=1, start_share=0.0),
        ),
    },
}


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, None)
    ap.add_argument("--examples", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--round", type=int, choices=sorted(ROUNDS), default=3)
    args = ap.parse_args(argv)
    CONFIGS = ROUNDS[args.round]
    # rounds 2 and 3 measured chunk KV computed alone (anchored chunks came in round 4)
    engine = Engine.load(EngineConfig(model_path=config_from_env().model_path, threads=args.threads, anchor_chunks=False))
    rows: dict[str, list[tuple[float, float, float]]] = {k: [] for k in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="quality-pilot-") as tmp:
        store = ChunkStore(engine, StoreConfig(root=Path(tmp), mem_bytes=3 * 2**29, disk_bytes=2**30))
        for ex in build(args.examples, seed=7):  # the sweep's first examples (held out from confirm)
            hashes = store.precompute(ex.chunks)
            q_ids, ans_ids = engine.query_ids(ex.question), engine.encode(ex.gold)
            full = measure.run(engine, store, hashes, q_ids, ans_ids, "full", BlendConfig(), None, ex.gold, 0)
            for label, (mode, cfg) in CONFIGS.items():
                r = measure.run(engine, store, hashes, q_ids, ans_ids, mode, cfg, full["logprobs"], ex.gold, 0)
                rows[label].append((full["ttft_s"] / r["ttft_s"], r["ll"] - full["ll"], r["kl"]))
            print(
                ex.id, f"full {full['ttft_s']:.1f}s", {k: tuple(round(x, 3) for x in v[-1]) for k, v in rows.items()}, flush=True
            )
    out = {
        k: {
            "speedup_median": statistics.median(x[0] for x in v),
            "delta_ll": statistics.mean(x[1] for x in v),
            "kl": statistics.mean(x[2] for x in v),
        }
        for k, v in rows.items()
    }
    for k, m in out.items():
        print(f"{k}: x{m['speedup_median']:.2f}, ΔLL {m['delta_ll']:+.3f}, KL {m['kl']:.3f}")
    return out


if __name__ == "__main__":
    main()
