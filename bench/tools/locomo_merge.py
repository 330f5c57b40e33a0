"""Join LoCoMo runs made per conversation (`--only`) into one result, as if run together.

    .venv/bin/python -m bench.tools.locomo_merge OUT_NAME RUN1.json RUN2.json ... [--out DIR]

Recall figures are per question and deterministic, so running conversations in parallel
processes (one database each) changes none of them; latencies are pooled over all processes,
which ran under the same load.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv: list[str] | None = None) -> dict:
    from bench.common import RESULTS
    from bench.quality.locomo import report
    from bench.quality.locomo.__main__ import RECALL_AT, ablation_summary

    ap = argparse.ArgumentParser(
        prog="python -m bench.tools.locomo_merge", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("name")
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    parts = [json.loads(p.read_text()) for p in args.runs]
    rows = [r for p in parts for r in p["questions_detail"]]
    first = parts[0]
    result = report.summarise(rows, methods=tuple(first["methods"]), recall_at=RECALL_AT)
    convs = sum(p["conversations"] for p in parts)
    result.update(
        {
            k: first[k]
            for k in (
                "benchmark",
                "quick",
                "data",
                "reader_model",
                "judge_model",
                "embedding_model",
                "budget_tokens",
                "reader_window_tokens",
                "rag_k",
                "distill",
            )
        }
    )
    result.update(
        {
            "conversations": convs,
            "turns": sum(p["turns"] for p in parts),
            "full_history_tokens_mean": round(sum(p["full_history_tokens_mean"] * p["conversations"] for p in parts) / convs, 1),
            "ingest_seconds": round(sum(p["ingest_seconds"] for p in parts), 1),
            "seconds": max(p["seconds"] for p in parts),
            "merged_from": [str(p) for p in args.runs],
            "questions_detail": rows,
        }
    )
    if all(p.get("ablation") for p in parts):
        variants = list(first["ablation"]["rows"])
        result["ablation"] = ablation_summary({v: [r for p in parts for r in p["ablation"]["rows"][v]] for v in variants})
    report.finish(result, args.out, args.name)
    return result


if __name__ == "__main__":
    main()
