"""The scaling bench's outputs: JSON, a markdown report, and the curves (PNG)."""

from __future__ import annotations

from pathlib import Path

from bench.command import save
from bench.quality.memory_scaling import feedback_report

CURVE_LABELS = {
    "labelled": "labelled examples",
    "unlabelled_judge": "unlabelled logs + judge",
    "learned_manager": "unlabelled logs, learned manager (trained on other spaces)",
    "bootstrap": "bootstrap (schema + glossary), no enrichment",
    "bootstrap_enriched": "bootstrap + enrichment",
    "bootstrap_navigation": "bootstrap + enrichment + navigation (browse)",
    **feedback_report.VARIANT_LABELS,
}
CURVE_NOTES = {
    "bootstrap": "The extract alone (`enrich: false`), without the enrich step.",
    "bootstrap_enriched": "The same sources with the enrich step (column descriptions and statistics, joins, "
    "glossary terms written into the tables they map to); /v1/context only.",
    "bootstrap_navigation": "The enriched org; after /v1/context a fixed browsing policy that reads only the question "
    "and the tree (open the catalog the question names, its schema, then the 2 tables whose "
    "name and summary share most words with the question). A question is hit when its keys "
    "are in the context or in what was browsed; tokens = context + browsed text; browse "
    "steps = tree/node calls. The agent here also has a BROWSE action.",
}


def finish(result: dict, out_dir: Path, name: str) -> None:
    save(out_dir / f"{name}.json", result, markdown(result, f"{name}.png"), plot)


def _f(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x:.1%}" if pct else f"{x:.2f}"


def _row(p: dict) -> str:
    ag = p.get("agent") or {}
    mem = p.get("memory") or {}
    items = (
        f"{mem.get('episodes', 0)} ep / {mem.get('memories_active', 0)} mem / {mem.get('chunks', 0)} chunks"
        if mem
        else "docs only"
    )
    return (
        f"| {p['shards'] if p['shards'] is not None else '–'} | {_f(p['hit_rate'], True)} | {_f(p['key_recall'], True)} | "
        f"{_f(p['mapping_keys_found'], True)} | {_f(p['convention_keys_found'], True)} | {p['context_tokens_mean']:.0f} | "
        f"{_f(ag.get('execution_accuracy'), True) if ag else 'not run'} | {_f(ag.get('mean_steps')) if ag else '–'} | "
        f"{_f(ag.get('sql_ran'), True) if ag else '–'} | {items} |"
    )


HEADER = [
    "| shards | memory hit rate | key recall | mapping keys | convention keys | context tokens | "
    "execution accuracy | mean steps | SQL ran | memory |",
    "|---|---|---|---|---|---|---|---|---|---|",
]


def markdown(r: dict, plot_name: str) -> str:
    small = "smollm2" in r["model"]
    agent_note = {
        "all": f"The agent ran at every point on {r['agent_questions']} questions (max {r['max_steps']} steps).",
        "ends": f"The agent ran at the first and last point of each curve on {r['agent_questions']} questions.",
        "one": f"Quick mode: the agent ran only at the last labelled point on {r['agent_questions']} question(s), as a "
        "smoke check of the tool loop; its accuracy here means nothing. Elsewhere it was skipped (`not run`).",
        "none": "The agent was skipped (`--agent-scope none`): hit rates only.",
    }[r["agent_scope"]]
    lines = [
        f"# Memory scaling{' (quick)' if r['quick'] else ''}: analytics spaces",
        "",
        f"{len(r['spaces'])} spaces ({', '.join(s['name'] for s in r['spaces'])}), {r['test_questions']} test "
        f"questions; seed {r['seed']}; agent/judge model `{r['model']}`; /v1/context budget {r['budget_tokens']} "
        f"tokens; shards of {r['shard_sizes']['labelled']} labelled examples / {r['shard_sizes']['logs']} user "
        f"logs; poisoned shard of {r['shard_sizes']['poison']} items.",
        "",
        "**Memory hit rate** (model-independent): share of questions whose every needed key (mapping or "
        "convention, known from the generator) appears in the /v1/context text. Key recall: share of keys "
        "found. " + agent_note,
        "",
    ]
    if small:
        lines += [
            "SmolLM2-135M rarely writes correct SQL for opaque schemas whatever the context: its execution "
            "accuracy is bounded by the model, not by memory. The hit rate is the figure that shows scaling; "
            "run with `--model` set to a capable litellm model to see accuracy follow it.",
            "",
        ]
    for name, points in r["curves"].items():
        lines += [f"## {CURVE_LABELS[name]}", ""] + ([CURVE_NOTES[name], ""] if name in CURVE_NOTES else [])
        lines += [*HEADER, *(_row(p) for p in points), ""]
        if name.startswith("bootstrap"):
            lines += [
                "Attainable hit rate (every needed key is in the bootstrapped sources at all): "
                + ", ".join(f"{p['shards']} shards {_f(p.get('attainable_hit_rate', 0.0), True)}" for p in points)
                + (
                    ". Browse steps per question: "
                    + ", ".join(f"{p['shards']}: {p['browse_steps_mean']:.2f}" for p in points if "browse_steps_mean" in p)
                    if any("browse_steps_mean" in p for p in points)
                    else ""
                )
                + ".",
                "",
            ]
    lines += [
        "## Expert schema docs in the prompt (no memory)",
        "",
        "Hand-written schema documentation of the question's space (tables, columns, joins, codes); like real "
        "schema docs it states no implicit conventions (fiscal quarters, active customers, cancelled "
        "exclusions).",
        "",
        *HEADER,
        _row(r["expert"]),
        "",
    ]
    pz = r["poison"] or {}
    lines += (
        []
        if not pz
        else [
            "## Poisoned shard (judge on)",
            "",
            "The unlabelled curve's last point, then a shard of prompt injections and bad traces (wrong SQL "
            "marked as success), distilled with the judge on. Episodes the judge quarantines are never served "
            "(search and /v1/context skip them).",
            "",
            *HEADER,
            _row(pz["clean"]),
            _row(pz["poisoned"]),
            "",
            f"Hit-rate change: {pz['hit_rate_change_points']:+.2f} points; accuracy change: "
            + (f"{pz['accuracy_change_points']:+.2f} points" if pz["accuracy_change_points"] is not None else "not measured")
            + f"; questions whose context held a poisoned episode or a memory derived from one: "
            f"{_f(pz['poisoned'].get('poison_exposure'), True)} ({_by_type(pz['poisoned'])}).",
            "",
        ]
        if pz
        else []
    )
    lines += feedback_report.markdown(r)
    distills = [j for j in r["jobs"] if j["kind"] == "distill"]
    if distills:
        tot = {k: sum(j.get(k, 0) for j in distills) for k in ("seen", "kept", "skipped", "quarantined", "memories_created")}
        lines += [
            f"Distillation (all distill jobs): seen {tot['seen']}, kept {tot['kept']}, skipped {tot['skipped']}, "
            f"quarantined {tot['quarantined']}, memories created {tot['memories_created']}; "
            f"{sum(j['seconds'] for j in distills):.0f} s.",
            "",
        ]
    lines += [
        f"![curves]({plot_name})",
        "",
        f"Whole run {r['seconds']:.0f} s ({', '.join(f'{k} {v:.0f} s' for k, v in r['timings_s'].items())}).",
    ]
    return "\n".join(lines) + "\n"


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = r["points"]
    pos = {k: i for i, k in enumerate(xs)}
    panels = [
        ("hit_rate", "memory hit rate (model-independent)"),
        ("execution_accuracy", f"execution accuracy ({r['model']})"),
        ("mean_steps", "mean agent steps"),
        ("context_tokens_mean", "context tokens"),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(17, 4.8))
    for ax, (key, title) in zip(axes, panels):
        for name, points in r["curves"].items():
            pts = [(pos[p["shards"]], _get(p, key)) for p in points if _get(p, key) is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=CURVE_LABELS[name])
        ceil = [
            (pos[p["shards"]], p["ceiling_hit_rate"]) for p in r["curves"].get("unlabelled_judge", []) if "ceiling_hit_rate" in p
        ]
        if key == "hit_rate" and ceil:
            ax.plot(*zip(*ceil), color="black", linestyle=":", label="ceiling of the unlabelled data")
        ev = _get(r["expert"], key)
        if ev is not None:
            ax.axhline(ev, color="grey", linestyle="--", label="expert schema docs")
        pv = _get(r["poison"]["poisoned"], key) if r.get("poison") else None
        if pv is not None:
            ax.scatter(
                [pos[r["poison"]["poisoned"]["shards"]] + 0.08],
                [pv],
                marker="x",
                color="red",
                s=60,
                label="+ poisoned shard (judge on)",
                zorder=5,
            )
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([str(x) for x in xs])
        ax.set_xlabel("memory shards")
        ax.set_title(title, fontsize=9)
        if key in ("hit_rate", "execution_accuracy"):
            ax.set_ylim(-0.02, 1.02)
        elif key == "mean_steps":
            ax.set_ylim(0, r["max_steps"] + 0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _by_type(point: dict) -> str:
    return ", ".join(f"{t.replace('_', ' ')}s {_f(v, True)}" for t, v in (point.get("poison_exposure_by_type") or {}).items())


def _get(point: dict, key: str) -> float | None:
    if key in ("execution_accuracy", "mean_steps"):
        return (point.get("agent") or {}).get(key)
    return point.get(key)
