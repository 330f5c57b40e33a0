"""Tables and the frontier plot from the benchmark's JSONL records."""

from __future__ import annotations

import json
from pathlib import Path

from bench.command import save
from bench.quality.inference_quality import measure


def load_all(out: Path, phase: str) -> list[dict]:
    recs = []
    for path in sorted(out.glob(f"inference_quality_{phase}*.jsonl")):
        recs += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return recs


def labels_of(records: list[dict]) -> list[str]:
    seen: dict[str, None] = {}
    for r in records:
        for k in r["runs"]:
            seen.setdefault(k, None)
    return list(seen)


def summary(records: list[dict], labels: list[str] | None = None) -> dict:
    labels = labels or labels_of(records)
    by_corpus = {
        c: measure.summarise([r for r in records if r["corpus"] == c], labels) for c in sorted({r["corpus"] for r in records})
    }
    return {"all": measure.summarise(records, labels), "by_corpus": by_corpus, "examples": len(records)}


def paired(records: list[dict], base: str, other: str) -> dict:
    """`other` minus `base` on the examples that ran both: gold LL, KL, F1 (mean, 95% CI) and the
    median TTFT ratio base / other (> 1: `other` is faster)."""
    rs = [r for r in records if base in r["runs"] and other in r["runs"]]
    if len(rs) < 2:
        return {"n": len(rs)}
    a, b = [r["runs"][base] for r in rs], [r["runs"][other] for r in rs]
    out = {
        "n": len(rs),
        "delta_ll": measure.mean_ci([y["ll"] - x["ll"] for x, y in zip(a, b)]),
        "delta_kl": measure.mean_ci([y["kl"] - x["kl"] for x, y in zip(a, b)]),
        "speedup_median": measure.median([x["ttft_s"] / y["ttft_s"] for x, y in zip(a, b)]),
    }
    if all("f1" in x for x in a + b):
        out["delta_f1"] = measure.mean_ci([y["f1"] - x["f1"] for x, y in zip(a, b)])
    return out


def paired_lines(records: list[dict], base: str) -> list[str]:
    lines = []
    for label in labels_of(records):
        if label in ("full", base):
            continue
        d = paired(records, base, label)
        if d["n"] < 2:
            continue
        f1 = f", F1 {_fmt(d['delta_f1'])}" if "delta_f1" in d else ""
        lines.append(
            f"- {label} minus {base} (n = {d['n']}): ΔLL {_fmt(d['delta_ll'])}, KL {_fmt(d['delta_kl'])}"
            f"{f1}, {base} TTFT / its TTFT {d['speedup_median']:.2f} (median)"
        )
    return lines


def _fmt(ci: dict, digits: int = 3) -> str:
    return f"{ci['mean']:+.{digits}f} ± {ci['ci95']:.{digits}f}"


def table(s: dict) -> str:
    has_f1 = any("f1" in m for m in s.values())
    head = "| configuration | n | TTFT median | × full | recomputed | LL | ΔLL vs full (95% CI) | KL | "
    head += "F1 | ΔF1 vs full (95% CI) | = full's text |" if has_f1 else ""
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for label, m in s.items():
        row = (
            f"| {label} | {m['n']} | {m['ttft_median_s']:.2f} s | {m['speedup_median']:.2f} | "
            f"{m['recomputed_share']:.2f} | {m['ll']['mean']:.3f} | {_fmt(m['delta_ll'])} | "
            f"{m['kl']['mean']:.3f} ± {m['kl']['ci95']:.3f} |"
        )
        if has_f1:
            row += f" {m['f1']['mean']:.3f} | {_fmt(m['delta_f1'])} | {m['same_text']:.2f} |" if "f1" in m else " | | |"
        lines.append(row)
    return "\n".join(lines)


def plot(s: dict, path: Path, confirm: dict | None = None) -> Path | None:
    """TTFT speed-up vs KL and vs ΔLL, one line per selection variant (ratios as points); the
    held-out confirmation's configurations as stars with their 95% intervals."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    groups: dict[str, list[tuple[float, float, float, str]]] = {}
    for label, m in s.items():
        if label == "full":
            continue
        name = label.rsplit(" ", 1)[0] if label[-1].isdigit() else label
        groups.setdefault(name, []).append((m["speedup_median"], m["kl"]["mean"], m["delta_ll"]["mean"], label))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for name, pts in sorted(groups.items()):
        pts.sort()
        xs = [p[0] for p in pts]
        style = "o-" if len(pts) > 1 else "s"
        axes[0].plot(xs, [p[1] for p in pts], style, label=name)
        axes[1].plot(xs, [p[2] for p in pts], style, label=name)
        for p in pts:
            axes[0].annotate(p[3].rsplit(" ", 1)[-1], (p[0], p[1]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    for label, m in (confirm or {}).items():
        if label == "full":
            continue
        x = m["speedup_median"]
        axes[0].errorbar(
            [x],
            [m["kl"]["mean"]],
            yerr=[[min(m["kl"]["ci95"], m["kl"]["mean"] * 0.99)], [m["kl"]["ci95"]]],
            fmt="*",
            ms=12,
            capsize=3,
            label=f"{label} (confirm, n={m['n']})",
        )
        axes[1].errorbar(
            [x],
            [m["delta_ll"]["mean"]],
            yerr=[m["delta_ll"]["ci95"]],
            fmt="*",
            ms=12,
            capsize=3,
            label=f"{label} (confirm, n={m['n']})",
        )
    axes[0].set_ylabel("KL(full ‖ mode), mean over answer tokens")
    axes[0].set_yscale("log")
    axes[1].set_ylabel("ΔLL of the gold answer vs full (nats/token)")
    axes[1].axhline(0, color="grey", lw=0.8)
    for ax in axes:
        ax.set_xlabel("TTFT speed-up vs full prefill (median of per-example ratios)")
        ax.axvline(3, color="grey", lw=0.8, ls=":")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("CacheBlend token selection: speed vs fidelity (SmolLM2-135M, CPU, ~2k-token contexts)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


ALONE = "epic+query 0.25 alone (round 3)"
REUSE_ALONE = "reuse alone"


def join(recs: list[dict], other: list[dict], label: str, as_label: str) -> tuple[list[dict], dict]:
    """Round 4's records with another run's configuration ``label`` joined per example as
    ``as_label``, for paired comparison across the two runs. Valid because full prefill and every
    metric but TTFT are deterministic on one thread: checked here, full's gold LL must agree."""
    by_id = {r["id"]: r for r in other if label in r["runs"]}
    merged, diffs = [], []
    for r in recs:
        old = by_id.get(r["id"])
        if old is None:
            merged.append(r)
            continue
        diffs.append(abs(old["runs"]["full"]["ll"] - r["runs"]["full"]["ll"]))
        merged.append({**r, "runs": {**r["runs"], as_label: old["runs"][label]}})
    check = {
        "joined": len(diffs),
        "max_abs_full_ll_diff": max(diffs, default=None),
        "same_full_text": sum(
            by_id[r["id"]]["runs"]["full"].get("text") == r["runs"]["full"].get("text") for r in recs if r["id"] in by_id
        ),
    }
    return merged, check


def write(out: Path, docs: Path | None = None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    result = {}
    for phase in ("sweep", "confirm", "query", "anchor"):
        recs = load_all(out, phase)
        if not recs:
            continue
        if phase == "anchor":
            recs, check = join(recs, load_all(out, "query"), "epic+query 0.25", ALONE)
            recs, check_reuse = join(recs, load_all(out, "reuse"), REUSE_ALONE, REUSE_ALONE)
            print(f"\njoined: round 3 {check}, reuse alone {check_reuse}")
        s = summary(recs)
        result[phase] = s
        print(f"\n## {phase}: {len(recs)} examples\n")
        print(table(s["all"]))
        for corpus, sc in s["by_corpus"].items():
            print(f"\n### {corpus}\n")
            print(table(sc))
        if phase == "query":  # round 3 is a paired comparison with round 2's default
            s["paired_vs_epic_0.25"] = {
                k: paired(recs, "epic 0.25", k) for k in labels_of(recs) if k not in ("full", "epic 0.25")
            }
            print("\n" + "\n".join(paired_lines(recs, "epic 0.25")))
        if phase == "anchor":  # round 4: anchored chunks against round 3's default on the same examples
            s["joined"] = {"round3": check, REUSE_ALONE: check_reuse}
            s[f"paired_vs_{ALONE}"] = {
                k: paired(recs, ALONE, k) for k in labels_of(recs) if k not in ("full", ALONE, REUSE_ALONE)
            }
            s["paired_anchored_reuse_vs_reuse_alone"] = paired(recs, REUSE_ALONE, "anchored reuse")
            print("\n" + "\n".join(line for line in paired_lines(recs, ALONE) if REUSE_ALONE not in line))
            print("\n".join(line for line in paired_lines(recs, REUSE_ALONE) if "anchored reuse minus" in line))
    if "sweep" in result:
        held_out = {
            **result.get("confirm", {}).get("all", {}),
            **{k: v for k, v in result.get("query", {}).get("all", {}).items() if k not in ("full", "epic 0.25")},
            **{k: v for k, v in result.get("anchor", {}).get("all", {}).items() if k.startswith("anchored")},
        }
        png = plot(result["sweep"]["all"], (docs or out) / "inference_quality_frontier.png", held_out)
        if png:
            print(f"\nplot: {png}")
    return save(out / "inference_quality.json", result, indent=1)
