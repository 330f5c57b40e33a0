"""The feedback stream's figures: each variant beside the curve without feedback and the ceiling,
the targets it is held to, and its section of the scaling report."""

from __future__ import annotations

from bench.quality.memory_scaling.feedback import POISON_ROUNDS, USERS

VARIANT_LABELS = {
    "feedback_clean": "unlabelled logs + judge, clean feedback",
    "feedback_noisy": "unlabelled logs + judge, noisy feedback",
    "feedback_adversarial": "unlabelled logs + judge, noisy feedback + adversarial key",
}


def tokens_per_answered(p: dict) -> float | None:
    """Context tokens spent per question whose context held everything it needed."""
    return round(p["context_tokens_mean"] / p["hit_rate"], 1) if p["hit_rate"] else None


def _agent(p: dict, key: str) -> float | None:
    return (p.get("agent") or {}).get(key)


def _pooled_tokens(points: list[dict]) -> float | None:
    answered = sum(p["hit_rate"] * p["questions"] for p in points)
    return sum(p["context_tokens_mean"] * p["questions"] for p in points) / answered if answered else None


def summarise(curves: dict, streams: dict, poisoned: dict | None, a) -> dict:
    """Per variant and measured point (shards > 0): with vs without feedback, the ceiling and the
    share of the gap closed; overall figures pooled over those points; the targets."""
    base = {p["shards"]: p for p in curves["unlabelled_judge"] if p["shards"]}
    out: dict = {
        "noise": a.feedback_noise,
        "adversarial": a.feedback_adversarial,
        "train_per_space": a.train_per_space,
        "split": "training questions from intents no test question uses (same spaces, own seed)",
        "ceiling": {k: p["ceiling_hit_rate"] for k, p in base.items()},
        "variants": {},
    }
    hits: dict[str, float] = {}
    for name, s in streams.items():
        rows, mine = [], [p for p in s["points"] if p["shards"]]
        for p in mine:
            b = base[p["shards"]]
            gap = b["ceiling_hit_rate"] - b["hit_rate"]
            rows.append(
                {
                    "shards": p["shards"],
                    "ceiling": b["ceiling_hit_rate"],
                    "ceiling_with": p["ceiling_hit_rate"],
                    "hit_without": b["hit_rate"],
                    "hit_with": p["hit_rate"],
                    "gap_closed": round((p["hit_rate"] - b["hit_rate"]) / gap, 4) if gap > 0 else None,
                    "tokens_per_answered_without": tokens_per_answered(b),
                    "tokens_per_answered_with": tokens_per_answered(p),
                    "accuracy_without": _agent(b, "execution_accuracy"),
                    "accuracy_with": _agent(p, "execution_accuracy"),
                    "steps_without": _agent(b, "mean_steps"),
                    "steps_with": _agent(p, "mean_steps"),
                    "memories_without": b["memory"]["memories_active"],
                    "memories_with": p["memory"]["memories_active"],
                    "train_hit_rate": p["feedback_round"]["train_hit_rate"],
                    "context_tokens_without": b["context_tokens_mean"],
                    "context_tokens_with": p["context_tokens_mean"],
                    "context_cut_bin": (p.get("calibration") or {}).get("cut_bin"),
                }
            )
        gap = sum(max(0.0, r["ceiling"] - r["hit_without"]) for r in rows)
        closed = sum(r["hit_with"] - r["hit_without"] for r in rows if r["ceiling"] > r["hit_without"])
        t_without, t_with = _pooled_tokens([base[p["shards"]] for p in mine]), _pooled_tokens(mine)
        hits[name] = sum(p["hit_rate"] for p in mine) / max(1, len(mine))
        pz = s["poisoned"]
        out["variants"][name] = {
            "noise": s["noise"],
            "adversarial": s["adversarial"],
            "points": rows,
            "gap_closed": round(closed / gap, 4) if gap > 0 else None,
            "tokens_per_answered_change": round(t_with / t_without - 1.0, 4) if t_with and t_without else None,
            "mean_hit_rate": round(hits[name], 4),
            "hit_change_points": round(
                100 * (hits[name] - sum(base[p["shards"]]["hit_rate"] for p in mine) / max(1, len(mine))), 2
            ),
            "poisoned": {
                "hit_rate": pz["hit_rate"],
                "poison_exposure": pz["poison_exposure"],
                "top3": {k: v for k, v in pz["top3"].items() if k != "ids_seen"},
                "flagged_poison_in_top3": pz["flagged_poison_in_top3"],
                "memories": pz["memory"]["memories_active"],
            },
            "wrong_memory": s["wrong_memory"],
            "signals_sent": s["signals_sent"],
            "posts_by_user": s["posts_by_user"],
            "stored_by_user": s["stored_by_user"],
        }
    if poisoned is not None:
        out["without_poisoned"] = {
            "hit_rate": poisoned["hit_rate"],
            "poison_exposure": poisoned["poison_exposure"],
            "top3": {k: v for k, v in poisoned["top3"].items() if k != "ids_seen"},
            "memories": poisoned["memory"]["memories_active"],
        }
    base_mean = sum(p["hit_rate"] for p in base.values()) / max(1, len(base))
    out["mean_hit_rate_without"] = round(base_mean, 4)
    out["noise_cost_points"] = (
        round(100 * (hits["feedback_clean"] - hits["feedback_noisy"]), 2)
        if {"feedback_clean", "feedback_noisy"} <= set(hits)
        else None
    )
    out["targets"] = targets(out)
    return out


def targets(s: dict) -> dict:
    """The targets feedback is held to, each `{value, met}` (met None: the run did not exercise it)."""
    out: dict = {}
    for name, v in s["variants"].items():
        wm, fp = v["wrong_memory"], v["poisoned"]["flagged_poison_in_top3"]
        out[name] = {
            "closes_half_the_gap": {"value": v["gap_closed"], "met": None if v["gap_closed"] is None else v["gap_closed"] >= 0.5},
            "tokens_per_answered_fall_20pct": {
                "value": v["tokens_per_answered_change"],
                "met": None if v["tokens_per_answered_change"] is None else v["tokens_per_answered_change"] <= -0.2,
            },
            "wrong_memory_leaves_top10_after_3": {
                "value": f"{wm['still_in_top10']} of {wm['flagged']} still in the top 10",
                "met": None if not wm["flagged"] else wm["still_in_top10"] == 0,
            },
            "flagged_poison_never_top3": {
                "value": f"{fp['in_top3']} of {fp['flagged']} flagged poisoned items in a top 3",
                "met": None if not fp["flagged"] else fp["in_top3"] == 0,
            },
        }
    if s["noise_cost_points"] is not None:
        out["noise_costs_at_most_2_points"] = {"value": s["noise_cost_points"], "met": s["noise_cost_points"] <= 2.0}
    return out


def _p(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def _n(x: float | None, fmt: str = "{:.0f}") -> str:
    return "–" if x is None else fmt.format(x)


def _top3(t: dict) -> str:
    by = ", ".join(f"{k} {v}" for k, v in t.get("slots_by_type", {}).items())
    return _p(t["share_of_slots"]) + (f" ({by})" if by else "")


def _met(t: dict) -> str:
    return {True: "met", False: "**not met**", None: "not exercised"}[t["met"]]


def markdown(r: dict) -> list[str]:
    s = r.get("feedback")
    if not s:
        return []
    lines = [
        "## Feedback stream (unlabelled logs + judge, with vs without feedback)",
        "",
        f"The unlabelled curve again in one org per variant, fed the same shards. At each point, after the "
        f"shard's distillation, {len(USERS)} simulated members (their own keys) each ask /v1/context for "
        f"their share of {s['train_per_space']} training questions per space "
        f"(split: {s['split']}) and post /v1/feedback on the retrieval they got: `helpful` on the items their "
        "answer used when every needed key was in the context, `wrong` on them when not; then a consolidate "
        "job; then the test questions are measured as on every curve. Noisy: "
        f"{s['noise']:.0%} of the signals flipped; adversarial: one more key answers {s['adversarial']:.0%} of the "
        "training questions, marking what carries a needed key `wrong` and the poisoned shard `helpful`. "
        "Ceiling: share of test questions whose every key is in some item the org can serve (episodes not "
        "quarantined, active memories). Gap closed: (with - without) / (ceiling - without). Tokens per "
        "answered question: context tokens / hit questions.",
        "",
    ]
    for name, v in s["variants"].items():
        lines += [
            f"### {VARIANT_LABELS.get(name, name)}",
            "",
            "| shards | ceiling | hit without | hit with | gap closed | tokens/answered without | with | "
            "accuracy without | with | steps without | with | memories without | with | context tokens without | with | "
            "context cut from bin |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in v["points"]:
            lines.append(
                f"| {p['shards']} | {_p(p['ceiling'])} | {_p(p['hit_without'])} | {_p(p['hit_with'])} | "
                f"{_p(p['gap_closed'])} | {_n(p['tokens_per_answered_without'])} | {_n(p['tokens_per_answered_with'])} | "
                f"{_p(p['accuracy_without'])} | {_p(p['accuracy_with'])} | {_n(p['steps_without'], '{:.2f}')} | "
                f"{_n(p['steps_with'], '{:.2f}')} | {p['memories_without']} | {p['memories_with']} | "
                f"{_n(p.get('context_tokens_without'))} | {_n(p.get('context_tokens_with'))} | "
                f"{_n(p.get('context_cut_bin'), '{}')} |"
            )
        lines += [
            "",
            f"Gap closed over the points: {_p(v['gap_closed'])}; mean hit rate "
            f"{_n(v.get('hit_change_points'), '{:+.2f}')} points; tokens per answered question (pooled) "
            f"{_n(None if v['tokens_per_answered_change'] is None else 100 * v['tokens_per_answered_change'], '{:+.1f}')} %; "
            f"signals sent {v['signals_sent']}; feedback events stored per user {v['stored_by_user']}.",
            "",
        ]
    wp = s.get("without_poisoned")
    lines += [
        "### Poisoned shard with feedback",
        "",
        f"After the unlabelled curve's last point, the poisoned shard, its distillation, then {POISON_ROUNDS} "
        "feedback rounds (each followed by a consolidate job). Top 3: the agent's search tool (k=3) on each test "
        "question. Flagged: a poisoned item (votes are kept for memories only) at least one honest user "
        "marked `wrong` (of them, by ≥ 3).",
        "",
        "| org | hit rate | poison exposure (context) | poisoned share of search top-3 slots (by type) | "
        "questions with poison in top 3 | flagged poisoned items in a top 3 | memories |",
        "|---|---|---|---|---|---|---|",
    ]
    if wp:
        lines.append(
            f"| without feedback | {_p(wp['hit_rate'])} | {_p(wp['poison_exposure'])} | {_top3(wp['top3'])} | "
            f"{_p(wp['top3']['questions'])} | – | {wp['memories']} |"
        )
    for name, v in s["variants"].items():
        pz = v["poisoned"]
        fp = pz["flagged_poison_in_top3"]
        lines.append(
            f"| {name} | {_p(pz['hit_rate'])} | {_p(pz['poison_exposure'])} | {_top3(pz['top3'])} | "
            f"{_p(pz['top3']['questions'])} | {fp['in_top3']} of {fp['flagged']} (≥ 3 users: {fp['by_three_or_more']}) | "
            f"{pz['memories']} |"
        )
    lines += ["", "### Targets", ""]
    for name, ts in s["targets"].items():
        if "met" in ts:
            lines.append(f"- noise cost (clean - noisy, mean hit rate): {ts['value']:+.2f} points ≤ 2: {_met(ts)}")
            continue
        for t, res in ts.items():
            value = res["value"]
            if t == "closes_half_the_gap" and value is None:
                value = "no gap: the curve without feedback is at the ceiling at every point"
            elif isinstance(value, float):
                value = f"{value:+.1%}"
            lines.append(f"- {name}, {t.replace('_', ' ')}: {value} — {_met(res)}")
    return [*lines, ""]
