"""Two `memscale bench locomo` results side by side: recall@10 per category and evidence in
context, as a markdown table and a plot (e.g. the code before and after a change).

    .venv/bin/python -m bench.tools.locomo_compare BEFORE.json AFTER.json --out PLOT.png [--methods hybrid,context@1000]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.quality.locomo.report import CATEGORIES, label, plot_pairs


def rows(before: dict, after: dict) -> list[str]:
    cats = sorted({int(c) for m in after["methods"].values() for c in m.get("per_category", {})})
    out = [
        "| method | " + " | ".join(f"r@10 {c} {CATEGORIES.get(c, '')}" for c in cats) + " | recall@10 | in context |",
        "|---" * (len(cats) + 3) + "|",
    ]
    for m in after["methods"]:
        if m not in before["methods"] or m == "full":
            continue
        b, a = before["methods"][m], after["methods"][m]
        cell = [f"{_r10(b, c):.3f} → {_r10(a, c):.3f}" for c in cats]
        out.append(
            f"| {label(m)} | " + " | ".join(cell) + f" | {b['recall@10']:.3f} → {a['recall@10']:.3f} | "
            f"{b['recall_in_context']:.3f} → {a['recall_in_context']:.3f} |"
        )
    return out


def _r10(m: dict, c: int) -> float:
    return m["per_category"].get(str(c), {}).get("recall@10") or 0.0


def plot(before: dict, after: dict, path: Path, methods: tuple[str, ...] = ("hybrid", "context@1000")) -> None:
    plot_pairs(path, list(methods), [("before", "tab:gray", before["methods"]), ("after", "tab:blue", after["methods"])])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.tools.locomo_compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="plot path (none: table only)")
    ap.add_argument("--methods", default="hybrid,context@1000", help="plot panels, comma-separated")
    args = ap.parse_args(argv)
    before, after = (json.loads(p.read_text()) for p in (args.before, args.after))
    print("\n".join(rows(before, after)))
    if args.out:
        plot(before, after, args.out, tuple(args.methods.split(",")))


if __name__ == "__main__":
    main()
