"""Aggregates, the printed summary, the markdown report and the per-category plots."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean

from bench.common import pct, write_report

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
LABELS = {
    "vector": "vector RAG (k=10)",
    "text": "text search (k=10)",
    "hybrid": "hybrid search (k=10)",
    "full": "full context (window)",
}


def label(method: str) -> str:
    return f"/v1/context ({method.split('@')[1]} tokens)" if method.startswith("context@") else LABELS.get(method, method)


def _avg(values: list[float]) -> float | None:
    return round(mean(values), 4) if values else None


def summarise(rows: list[dict], *, methods: tuple[str, ...], recall_at: tuple[int, ...]) -> dict:
    out: dict = {"questions": len(rows), "methods": {}, "reader": {}}
    for m in methods:
        recs = [r["methods"][m] for r in rows]
        keys = [f"recall@{k}" for k in recall_at if recs and f"recall@{k}" in recs[0]] + ["recall_in_context"]
        per_cat: dict[str, dict] = {}
        for c in sorted({r["category"] for r in rows}):
            sub = [r["methods"][m] for r in rows if r["category"] == c]
            per_cat[str(c)] = {"n": len(sub), **{k: _avg([s[k] for s in sub]) for k in keys}}
        lat = [x["latency_ms"] for x in recs]
        entry = {k: _avg([x[k] for x in recs]) for k in keys}
        entry.update(
            per_category=per_cat,
            tokens_mean=_avg([x["tokens"] for x in recs]),
            latency_ms={"p50": round(pct(lat, 50), 2), "p95": round(pct(lat, 95), 2)},
        )
        if recs and "service_tokens" in recs[0]:
            entry["service_tokens_mean"] = _avg([x["service_tokens"] for x in recs])
        out["methods"][m] = entry
        read = [(r["category"], r["methods"][m]) for r in rows if "f1" in r["methods"][m]]
        if read:
            judged = [x["judge_correct"] for _, x in read if "judge_correct" in x]
            out["reader"][m] = {
                "n": len(read),
                "f1": _avg([x["f1"] for _, x in read]),
                "per_category": {str(c): _avg([x["f1"] for cc, x in read if cc == c]) for c in sorted({c for c, _ in read})},
                "judge_accuracy": _avg([float(j) for j in judged]) if judged else None,
                "errors": sum(1 for _, x in read if "reader_error" in x),
            }
    return out


def finish(result: dict, out_dir: Path, name: str) -> None:
    full = result["full_history_tokens_mean"]
    for m in result["methods"].values():
        m["share_of_full_history"] = round(m["tokens_mean"] / full, 4) if m["tokens_mean"] is not None else None
    write_report(result, out_dir, name, markdown(result), plot)
    if result.get("ablation"):
        plot_before_after(result, out_dir / f"{name}_before_after.png")


def plot_before_after(r: dict, path: Path) -> None:
    """Recall@10 per category, ranking before vs. now, for hybrid search and /v1/context."""
    from bench.quality.locomo.__main__ import DEFAULT_VARIANT

    variants = r["ablation"]["variants"]
    # the ranking before: the RRF of the first pass, else an earlier stop's ranking in this run
    before = next((v for v in variants if v.startswith("before") or v.endswith("stop's ranking)")), None)
    if before is None:
        return
    methods = [m for m in variants[before] if m in variants[DEFAULT_VARIANT]]
    name = "before (RRF)" if before.startswith("before") else before[before.index("(") + 1 : -1]
    plot_pairs(path, methods, [(name, "tab:gray", variants[before]), ("now", "tab:blue", variants[DEFAULT_VARIANT])])


def plot_pairs(path: Path, methods: list[str], series: list[tuple[str, str, dict]]) -> None:
    """Bars of recall@10 per category, one panel per method; `series`: (name, colour, {method: figures})."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = sorted({int(c) for m in series[-1][2].values() for c in m.get("per_category", {})})
    fig, axes = plt.subplots(1, len(methods), figsize=(5 * len(methods), 4.2), squeeze=False)
    for ax, m in zip(axes[0], methods):
        for j, (name, colour, figures) in enumerate(series):
            vals = [figures[m]["per_category"].get(str(c), {}).get("recall@10") or 0 for c in cats]
            xs = [i + j * 0.4 for i in range(len(cats))]
            ax.bar(xs, vals, 0.4, color=colour, label=name)
            for x, y in zip(xs, vals):
                ax.text(x, y + 0.01, f"{y:.2f}", ha="center", fontsize=7)
        ax.set_xticks([i + 0.2 for i in range(len(cats))])
        ax.set_xticklabels([f"{c} {CATEGORIES.get(c, '')}" for c in cats], fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title(f"{label(m)}: evidence recall@10", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _f(x: float | None, pct_: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x:.1%}" if pct_ else f"{x:.3f}"


def markdown(r: dict) -> str:
    cats = sorted({int(c) for m in r["methods"].values() for c in m["per_category"]})
    first = next(iter(r["methods"].values()))
    lines = [
        f"# LoCoMo{' (quick)' if r['quick'] else ''}: evidence recall and answer F1",
        "",
        f"{r['questions']} questions (categories 1–4 with evidence) over {r['conversations']} conversation(s), "
        f"{r['turns']} turns; full history {r['full_history_tokens_mean']:.0f} tokens per conversation. "
        f"Reader `{r['reader_model']}`; embeddings `{r['embedding_model']}`; /v1/context budget "
        f"{', '.join(map(str, r['budget_tokens']))} tokens (the reader gets the service's rendered text; "
        "recall@k ranks its items by score).",
        "",
        "## Evidence recall (model-independent)",
        "",
        "| method | recall@5 | recall@10 | recall@25 | in reader context | tokens | share of full | p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, e in r["methods"].items():
        lines.append(
            f"| {label(m)} | {_f(e.get('recall@5'))} | {_f(e.get('recall@10'))} | "
            f"{_f(e.get('recall@25'))} | {_f(e['recall_in_context'])} | {e['tokens_mean']:.0f} | "
            f"{_f(e['share_of_full_history'], True)} | {e['latency_ms']['p50']} | {e['latency_ms']['p95']} |"
        )
    lines += [
        "",
        "Per category (recall@10; `full`: in window):",
        "",
        "| method | "
        + " | ".join(f"{c} {CATEGORIES.get(c, '')} (n={first['per_category'].get(str(c), {}).get('n', 0)})" for c in cats)
        + " |",
        "|---|" + "---|" * len(cats),
    ]
    for m, e in r["methods"].items():
        key = "recall@10" if "recall@10" in e else "recall_in_context"
        lines.append(f"| {label(m)} | " + " | ".join(_f(e["per_category"].get(str(c), {}).get(key)) for c in cats) + " |")
    lines += ablation_lines(r)
    lines += ["", "## Reader answers (model-dependent)", ""]
    if not r["reader"]:
        lines.append("Reader skipped (`--reader-questions 0`).")
    else:
        n = next(iter(r["reader"].values()))["n"]
        lines += [
            f"{n} questions (stratified over categories) answered by `{r['reader_model']}` from each method's "
            "excerpts. "
            + (
                "A 135M-parameter model bounds answer quality far below what retrieval allows; "
                "compare methods with each other and with the recall above, not with published "
                "LoCoMo F1 of large models."
                if "smollm2" in r["reader_model"]
                else ""
            ),
            "",
            "| method | F1 | " + " | ".join(f"F1 cat {c}" for c in cats) + " | judge accuracy |",
            "|---|---|" + "---|" * len(cats) + "---|",
        ]
        for m, e in r["reader"].items():
            lines.append(
                f"| {label(m)} | {_f(e['f1'])} | "
                + " | ".join(_f(e["per_category"].get(str(c))) for c in cats)
                + f" | {_f(e['judge_accuracy']) if r['judge_model'] else 'no judge configured'} |"
            )
    if r.get("distill"):
        lines += [
            "",
            f"Distillation: {json.dumps({k: r['distill'].get(k) for k in ('status', 'seen', 'kept', 'memories_created')})}",
        ]
    lines += ["", f"Ingestion {r['ingest_seconds']} s; whole run {r['seconds']} s."]
    return "\n".join(lines) + "\n"


def ablation_lines(r: dict) -> list[str]:
    """Each ranking lever off in turn (app.search.service.Tuning), plus the leave-one-out choice."""
    ab = r.get("ablation")
    if not ab:
        return []
    cats = sorted({int(c) for v in ab["variants"].values() for m in v.values() for c in m["per_category"]})
    ctx = sorted({m for v in ab["variants"].values() for m in v if m.startswith("context@")}, key=lambda m: int(m.split("@")[1]))
    lines = [
        "",
        "## Ablation: ranking levers (hybrid search top-k; /v1/context at each budget)",
        "",
        "| variant | hybrid r@5 | r@10 | r@25 | "
        + " | ".join(f"r@10 cat {c}" for c in cats)
        + " | p50/p95 ms | "
        + " | ".join(f"{m}: r@10 / in context / tokens / p50/p95 ms" for m in ctx)
        + " |",
        "|---|---|---|---|" + "---|" * len(cats) + "---|" + "---|" * len(ctx),
    ]
    for v, ms in ab["variants"].items():
        h = ms["hybrid"]
        cells = [_f(h.get("recall@5")), _f(h.get("recall@10")), _f(h.get("recall@25"))]
        cells += [_f(h["per_category"].get(str(c), {}).get("recall@10")) for c in cats]
        cells.append(f"{h['latency_ms']['p50']:.0f}/{h['latency_ms']['p95']:.0f}")
        for m in ctx:
            e = ms.get(m)
            if e is None:
                cells.append("–")
                continue
            cells.append(
                f"{_f(e.get('recall@10'))} / {_f(e['recall_in_context'])} / {e['tokens_mean']:.0f} / "
                f"{e['latency_ms']['p50']:.0f}/{e['latency_ms']['p95']:.0f}"
            )
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    loo = ab.get("leave_one_conversation_out")
    if loo:
        lines += [
            "",
            f"Leave-one-conversation-out (variant chosen on the other conversations by hybrid recall@10, "
            f"scored on the held-out one): recall@10 {loo['hybrid_recall@10']:.3f} vs "
            f"{loo['default_hybrid_recall@10']:.3f} for the default on all; chosen: "
            + ", ".join(f"{c} → {v}" for c, v in loo["chosen"].items())
            + ".",
        ]
    return lines


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = sorted({int(c) for m in r["methods"].values() for c in m["per_category"]})
    methods = list(r["methods"])
    colours = {m: plt.cm.tab10(i % 10) for i, m in enumerate(methods)}
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.6), gridspec_kw={"width_ratios": [3, 2, 3]})
    width = 0.8 / len(methods)
    for j, m in enumerate(methods):
        e = r["methods"][m]
        key = "recall@10" if "recall@10" in e else "recall_in_context"
        vals = [e["per_category"].get(str(c), {}).get(key) or 0 for c in cats]
        axes[0].bar([i + j * width for i in range(len(cats))], vals, width, color=colours[m], label=label(m))
    axes[0].set_title("Evidence recall@10 by category (full context: in window)", fontsize=10)
    for m in methods:  # the budget trade-off: what the reader is given vs what it costs
        e = r["methods"][m]
        if e.get("share_of_full_history"):
            axes[1].scatter([100 * e["share_of_full_history"]], [e["recall_in_context"]], color=colours[m], s=40)
    axes[1].axvspan(0, 10, ymin=0.85, ymax=1.0, color="green", alpha=0.12, label="target: >= 0.85 under 10% of tokens")
    axes[1].set_xscale("log")
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    axes[1].xaxis.set_major_locator(FixedLocator([1, 2, 5, 10, 20, 50, 100]))
    axes[1].xaxis.set_major_formatter(ScalarFormatter())
    axes[1].xaxis.set_minor_formatter(NullFormatter())
    axes[1].set_xlabel("tokens given to the reader, % of the full conversation (log)")
    axes[1].set_title("Evidence recall in the reader's context vs. tokens", fontsize=10)
    axes[1].set_ylim(0, 1)
    axes[1].legend(fontsize=7, loc="lower right")
    rm = list(r["reader"])
    rw = 0.8 / max(1, len(rm))
    for j, m in enumerate(rm):
        vals = [r["reader"][m]["per_category"].get(str(c)) or 0 for c in cats]
        axes[2].bar([i + j * rw for i in range(len(cats))], vals, rw, color=colours[m])
    axes[2].set_title(f"Answer F1 by category, reader {r['reader_model']}", fontsize=10)
    for ax, w in ((axes[0], width), (axes[2], rw)):
        ax.set_xticks([i + 0.4 - w / 2 for i in range(len(cats))])
        ax.set_xticklabels([f"{c} {CATEGORIES.get(c, '')}" for c in cats], fontsize=8)
        ax.set_ylim(0, 1)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
