"""Memory scaling on synthetic enterprise analytics spaces: does the agent get better as memory grows?

    .venv/bin/python -m bench.quality.memory_scaling [--quick] [--seed N] [--model local/smollm2] [--shards 0,1,2,4,8]

Curves (each its own org, memory added shard by shard): labelled examples; unlabelled user logs
filtered by the distillation judge (real `distill` + `consolidate` jobs); bootstrapped schema and
glossary (real `bootstrap` job). Baseline: expert schema docs in the prompt, no memory. Poison:
the unlabelled curve's last point plus a shard of prompt injections and bad traces. Feedback: the
unlabelled curve again, in orgs whose simulated users mark what /v1/context handed them on
training questions (feedback.py): clean, noisy, and noisy with an adversarial key, side by side
with the curve without feedback and the ceiling its data allows.

Model-independent: memory hit rate (the question's needed mappings/rules are in /v1/context's
text). Model-dependent: execution accuracy and steps of the tool-using agent.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def parse(argv: list[str] | None) -> argparse.Namespace:
    from bench.command import parser

    ap = parser(__doc__, "scaling", prog="memscale bench scaling", folder=True)
    ap.add_argument("--quick", action="store_true", help="2 spaces, 8 questions, shards 0,1,2, agent on 1 question")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--model", default=None, help="agent (and judge) model, any litellm string (default MEMSCALE_LLM_MODEL)")
    ap.add_argument("--shards", default=None, help="measurement points (default 0,1,2,4,8; quick 0,1,2)")
    ap.add_argument("--spaces", type=int, default=None, help="number of spaces (default 4; quick 2)")
    ap.add_argument("--questions-per-space", type=int, default=None, help="test questions per space (default 12; quick 4)")
    ap.add_argument("--labelled-per-shard", type=int, default=None, help="default 8; quick 4")
    ap.add_argument("--logs-per-shard", type=int, default=None, help="default 8; quick 2")
    ap.add_argument("--poison", type=int, default=None, help="items in the poisoned shard (default 8; quick 4)")
    ap.add_argument(
        "--agent-questions", type=int, default=None, help="questions the agent answers per point (default 8; quick 1)"
    )
    ap.add_argument(
        "--agent-scope",
        choices=["all", "ends", "one", "none"],
        default=None,
        help="where the agent runs: every point, first+last of each curve, only the last labelled "
        "point, or nowhere (default all; quick one)",
    )
    ap.add_argument("--max-steps", type=int, default=None, help="agent step limit (default 3; quick 1)")
    ap.add_argument("--budget", type=int, default=1000, help="/v1/context budget_tokens")
    ap.add_argument(
        "--curves",
        default="labelled,unlabelled,bootstrap,feedback",
        help="curves to run (comma list of labelled, unlabelled, bootstrap, feedback; bootstrap runs plain, "
        "enriched and enriched + navigation side by side; feedback runs the unlabelled curve with the "
        "feedback stream, clean, noisy and adversarial; manager runs it with a manager trained on other "
        "spaces); the poisoned shard and feedback need unlabelled",
    )
    ap.add_argument("--feedback-noise", type=float, default=0.2, help="share of honest signals flipped (default 0.2)")
    ap.add_argument(
        "--feedback-adversarial",
        type=float,
        default=0.1,
        help="share of the training questions the adversarial key also answers (default 0.1)",
    )
    ap.add_argument(
        "--feedback-variants",
        default="clean,noisy,adversarial",
        help="feedback streams to run, each its own org (comma list of clean, noisy, adversarial)",
    )
    ap.add_argument(
        "--train-per-space",
        type=int,
        default=None,
        help="training questions per space for the feedback stream, from intents no test question uses (default 12; quick 4)",
    )
    ap.add_argument(
        "--utility-weight",
        type=float,
        default=None,
        help="the ranking's utility_weight for this run (app/search/tuning.py; default: the app's)",
    )
    ap.add_argument(
        "--manager",
        choices=["rules", "learned"],
        default="rules",
        help="memory manager of the distill and consolidate jobs, passed as their `manager` param where "
        "they take one (learned: refused when neither does)",
    )
    ap.add_argument("--name", default=None, help="result file stem (default scaling / scaling_quick)")
    a = ap.parse_args(argv)
    q = a.quick
    defaults = {
        "shards": "0,1,2" if q else "0,1,2,4,8",
        "spaces": 2 if q else 4,
        "questions_per_space": 4 if q else 12,
        "labelled_per_shard": 4 if q else 8,
        "logs_per_shard": 2 if q else 8,
        "poison": 4 if q else 8,
        "agent_questions": 1 if q else 8,
        "agent_scope": "one" if q else "all",
        "max_steps": 1 if q else 3,
        "train_per_space": 4 if q else 12,
        "name": "scaling_quick" if q else "scaling",
    }
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.points = sorted({int(x) for x in a.shards.split(",")} | {0})
    a.curves = {c.strip() for c in a.curves.split(",") if c.strip()}
    unknown = a.curves - {"labelled", "unlabelled", "bootstrap", "feedback", "manager"}
    if unknown:
        ap.error(f"unknown curves: {', '.join(sorted(unknown))}")
    if "feedback" in a.curves and "unlabelled" not in a.curves:
        ap.error("the feedback curves compare with the unlabelled curve: add unlabelled to --curves")
    a.feedback_variants = [v.strip() for v in a.feedback_variants.split(",") if v.strip()]
    if set(a.feedback_variants) - {"clean", "noisy", "adversarial"}:
        ap.error("--feedback-variants: a comma list of clean, noisy, adversarial")
    if not (0.0 <= a.feedback_noise <= 1.0 and 0.0 <= a.feedback_adversarial <= 1.0):
        ap.error("--feedback-noise and --feedback-adversarial are shares in [0, 1]")
    from bench.quality.memory_scaling.run import manager_supported

    if a.manager == "learned" and not (manager_supported("distill") or manager_supported("consolidate")):
        ap.error("--manager learned: neither the distill nor the consolidate job takes a `manager` param on this checkout")
    return a


def main(argv: list[str] | None = None, *, embedder=None) -> dict:
    from app.config import Settings
    from bench.quality.memory_scaling import feedback as fb
    from bench.quality.memory_scaling import feedback_report, manager_curve, report
    from bench.quality.memory_scaling.curves import draw, run_curve
    from bench.quality.memory_scaling.run import (
        Harness,
        agent_traces,
        attainable,
        probe_browse,
        probe_docs,
        probe_memory,
        run_agent,
        summarise_point,
    )

    a = parse(argv)
    model = a.model or Settings().llm_model
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="memscale_scaling_"))
    data = draw(a, tmp)
    spaces, tests, top, poison, by_name = data.spaces, data.tests, data.top, data.poison, data.by_name
    order = sorted(range(len(tests)), key=lambda i: i % a.questions_per_space)  # round robin over spaces
    agent_set = {id(tests[i]) for i in order[: a.agent_questions]}

    h = Harness(
        "memscale_bench_" + re.sub(r"\W", "_", a.name).lower(),  # one database per result name
        model=model,
        budget=a.budget,
        embedder=embedder,
        manager=a.manager,
    )
    if a.utility_weight is not None:
        h.app.state.tuning = replace(h.app.state.tuning, utility_weight=a.utility_weight)
    curves: dict[str, list[dict]] = {
        "labelled": [],
        "unlabelled_judge": [],
        "bootstrap": [],
        "bootstrap_enriched": [],
        "bootstrap_navigation": [],
    }
    traces: list[dict] = []
    timings: dict[str, float] = {}
    streams: dict[str, dict] = {}

    def wants_agent(curve: str, k: int) -> bool:
        if a.agent_scope == "all":
            return True
        if a.agent_scope == "ends":
            return k in (0, top)
        return a.agent_scope == "one" and curve == "labelled" and k == top

    def measure(org, curve: str, k: int, label: str, poison_ids=None, navigation: bool = False) -> dict:
        probes = [probe_memory(h, org, q) for q in tests]
        if navigation:
            probes = [probe_browse(h, org, p) for p in probes]
        if wants_agent(curve, k):
            for p in probes:
                if id(p.question) in agent_set:
                    run_agent(h, org, p, by_name, a.max_steps, navigation=navigation)
            traces.extend(agent_traces(probes, label))
        point = summarise_point(probes, label=label, shards=k, inventory=h.inventory(org), poison_ids=poison_ids)
        if curve.startswith("bootstrap"):
            point["attainable_hit_rate"] = attainable(tests, by_name, k, max(1, top))
        print(
            f"  {label:<28} hit {point['hit_rate']:.3f}  keys {point['key_recall']:.3f}  tokens "
            f"{point['context_tokens_mean']:.0f}"
            + (
                f"  acc {point['agent']['execution_accuracy']:.3f} steps {point['agent']['mean_steps']:.2f}"
                if point["agent"]
                else ""
            ),
            flush=True,
        )
        return point

    try:
        print(
            f"bench/quality/memory_scaling: {len(spaces)} spaces, {len(tests)} test questions, points {a.points}, model {model}"
        )
        t0 = time.perf_counter()
        empty = measure(h.new_org("empty"), "empty", 0, "empty memory (0 shards)")
        for c in curves.values():
            c.append(empty)
        timings["empty"] = time.perf_counter() - t0

        poisoned = learned_manager = None
        if "labelled" in a.curves:
            t0 = time.perf_counter()
            org = h.new_org("labelled")
            run_curve(
                h,
                org,
                "labelled",
                data,
                a.points,
                lambda k: curves["labelled"].append(measure(org, "labelled", k, f"labelled {k} shards")),
            )
            timings["labelled"] = time.perf_counter() - t0

        if "unlabelled" in a.curves:
            t0 = time.perf_counter()
            org = h.new_org("unlabelled")

            def unlabelled(k: int) -> None:
                point = measure(org, "unlabelled_judge", k, f"unlabelled+judge {k} shards", poison_ids={})
                point["ceiling_hit_rate"] = fb.ceiling(h, org, tests)
                curves["unlabelled_judge"].append(point)

            run_curve(h, org, "unlabelled_judge", data, a.points, unlabelled)
            timings["unlabelled_judge"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            h.ingest(org, poison, user="logs", source="poison")
            h.distill(org)
            pids = fb.poisoned_ids(h, org, poison)
            poisoned = measure(org, "poisoned", top, f"unlabelled+judge {top} + poison", poison_ids=pids)
            poisoned["top3"] = fb.top3(org, tests, set().union(*pids.values()) if pids else set())
            timings["poisoned"] = time.perf_counter() - t0

        if "feedback" in a.curves:
            train = fb.train_questions(a.seed, spaces, tests, a.train_per_space)
            for v in fb.variants(a.feedback_noise, a.feedback_adversarial, a.feedback_variants):
                t0 = time.perf_counter()
                streams[v.name] = fb.run_variant(h, a, data, v, train, measure)
                curves[v.name] = [empty, *streams[v.name]["points"]]
                timings[v.name] = time.perf_counter() - t0

        if "manager" in a.curves:  # bench/quality/memory_scaling/manager_curve.py
            t0 = time.perf_counter()
            learned_manager = manager_curve.run(h, a, data, measure, tmp)
            curves[manager_curve.NAME] = [empty, *learned_manager.pop("points")]
            timings[manager_curve.NAME] = time.perf_counter() - t0

        if "bootstrap" in a.curves:
            # the same sources three ways, side by side: the plain extract (no enrich step), with the
            # enrich step, and with enrichment + navigation (context plus a fixed browsing policy)
            t0 = time.perf_counter()
            org = h.new_org("bootstrap")
            run_curve(
                h,
                org,
                "bootstrap",
                data,
                a.points,
                lambda k: curves["bootstrap"].append(measure(org, "bootstrap", k, f"bootstrap {k} shards")),
            )
            timings["bootstrap"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            org = h.new_org("bootstrap_enriched")

            def enriched(k: int) -> None:
                curves["bootstrap_enriched"].append(measure(org, "bootstrap_enriched", k, f"bootstrap+enrich {k} shards"))
                curves["bootstrap_navigation"].append(
                    measure(org, "bootstrap_navigation", k, f"bootstrap+enrich+browse {k}", navigation=True)
                )

            run_curve(h, org, "bootstrap_enriched", data, a.points, enriched)
            timings["bootstrap_enriched_and_navigation"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        probes = [probe_docs(h, q, by_name[q.space].expert_doc()) for q in tests]
        if a.agent_scope in ("all", "ends"):
            for p in probes:
                if id(p.question) in agent_set:
                    run_agent(h, None, p, by_name, a.max_steps)
            traces.extend(agent_traces(probes, "expert docs"))
        expert = summarise_point(probes, label="expert schema docs, no memory", shards=None)
        print(f"  {'expert schema docs':<28} hit {expert['hit_rate']:.3f}  tokens {expert['context_tokens_mean']:.0f}")
        timings["expert"] = time.perf_counter() - t0
    finally:
        h.close()
        shutil.rmtree(tmp, ignore_errors=True)

    curves = {name: pts for name, pts in curves.items() if len(pts) > 1}
    clean = curves["unlabelled_judge"][-1] if poisoned is not None else None
    result = {
        "benchmark": "scaling",
        "quick": a.quick,
        "seed": a.seed,
        "model": model,
        "judge_model": model,
        "embedding_model": h.settings.embedding_model,
        "budget_tokens": a.budget,
        "max_steps": a.max_steps,
        "agent_scope": a.agent_scope,
        "agent_questions": a.agent_questions,
        "spaces": [{"name": sp.name, "domain": sp.domain[0], "tables": sp.t, "intents": len(sp.intents)} for sp in spaces],
        "test_questions": len(tests),
        "points": a.points,
        "shard_sizes": {"labelled": a.labelled_per_shard, "logs": a.logs_per_shard, "poison": a.poison},
        "curves": curves,
        "expert": expert,
        "poison": {
            "clean": clean,
            "poisoned": poisoned,
            "hit_rate_change_points": round(100 * (poisoned["hit_rate"] - clean["hit_rate"]), 2),
            "accuracy_change_points": (
                round(100 * (poisoned["agent"]["execution_accuracy"] - clean["agent"]["execution_accuracy"]), 2)
                if poisoned["agent"] and clean["agent"]
                else None
            ),
        }
        if poisoned
        else None,
        "feedback": feedback_report.summarise(curves, streams, poisoned, a) if streams else None,
        "manager": a.manager,
        "learned_manager": learned_manager,
        "utility_weight": h.app.state.tuning.utility_weight,
        "jobs": h.job_stats,
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "seconds": round(time.perf_counter() - started, 1),
        "agent_traces": traces,
    }
    report.finish(result, a.out, a.name)
    return result


if __name__ == "__main__":
    main()
