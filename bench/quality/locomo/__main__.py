"""LoCoMo (dev split) through the memory service.

    .venv/bin/python -m bench.quality.locomo [--quick] [--data PATH] [--budget 1000] [--reader-questions 20]
        [--model local/smollm2] [--judge-model openai/gpt-4o-mini] [--distill]

Model-independent: evidence recall (LoCoMo `evidence` dia_ids among the turns handed out).
Model-dependent: answer F1 of the reader model, and LLM-judge accuracy when a judge is named
(`--judge-model` or MEMSCALE_JUDGE_MODEL). With the default local SmolLM2-135M reader, F1 is
bounded by the model, not by retrieval: read it beside the recall figures.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from pathlib import Path
from statistics import mean

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RECALL_AT = (5, 10, 25)

# The ranking levers of app.search.service.Tuning, each off in turn (the default has all on):
# (settings, whether /v1/context is run too). Hybrid search alone shows a lever's effect on the
# ranking; the ranking "before" also runs /v1/context, for the before/after comparison.
NO2 = {"expand_terms": 0}  # the second round off
ABLATIONS = {
    "before: rrf at k-dependent depth": ({"fusion": "rrf", "pool": None}, True),
    "rrf, pool 100": ({"fusion": "rrf"}, False),
    "score fusion": ({"neighbour": 0.0, "session": 0.0, **NO2}, False),
    "score fusion + neighbours": ({"session": 0.0, **NO2}, False),
    "score fusion + sessions": ({"neighbour": 0.0, **NO2}, False),
    "score fusion + neighbours + sessions (no second round)": (NO2, True),
    "no vocabulary lift": ({"vocab_terms": 0}, True),
    "no length prior": ({"length_prior": 0.0}, False),
    "neither vocabulary lift nor length prior (eleventh stop's ranking)": ({"vocab_terms": 0, "length_prior": 0.0}, True),
    # the time a question names (time_weight 1.0 in the default): off, and other weights for the
    # leave-one-conversation-out choice
    "no time window (eighteenth stop's ranking)": ({"time_weight": 0.0}, True),
    "time window 0.25": ({"time_weight": 0.25}, False),
    "time window 0.5": ({"time_weight": 0.5}, False),
    "time window 2.0": ({"time_weight": 2.0}, False),
    # the speaker lift (speaker_weight 8.0 in the default): off is the ranking before it
    "no speaker lift": ({"speaker_weight": 0.0}, True),
    "speaker lift 4.0": ({"speaker_weight": 4.0}, False),
    "speaker lift 12.0": ({"speaker_weight": 12.0}, False),
    # the final squash's scale (3.0 in the default): context orders by the squashed score
    "squash 1.0": ({"squash_scale": 1.0}, True),
    "squash 5.0": ({"squash_scale": 5.0}, True),
    # the turns beside the best (beside_from 0, off, in the default)
    "turns beside the best 20": ({"beside_from": 20}, True),
    "beside the best 10": ({"beside_from": 10}, False),
    "beside the best 40": ({"beside_from": 40}, False),
}
DEFAULT_VARIANT = (
    "score fusion + neighbours + sessions + vocabulary lift + length prior + time window, second round in context (default)"
)


def method_plan(budgets: list[int]) -> tuple[list[str], list[str]]:
    """Method names in report order, and those the reader answers from."""
    return [f"context@{b}" for b in budgets] + ["vector", "text", "hybrid", "full"], [
        f"context@{budgets[0]}",
        "vector",
        "text",
        "full",
    ]


def parse(argv: list[str] | None) -> argparse.Namespace:
    from bench.common import RESULTS

    ap = argparse.ArgumentParser(
        prog="memscale bench locomo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=None, help="LoCoMo JSON (default: DEFAULT in bench/quality/locomo/data.py)")
    ap.add_argument("--quick", action="store_true", help="one conversation, 3 sessions, 10 questions, 1 read")
    ap.add_argument("--budget", default="1000", help="/v1/context budget_tokens; several comma-separated")
    ap.add_argument(
        "--reader-questions",
        type=int,
        default=None,
        help="questions answered by the reader (stratified over categories; default 20, quick 1; 0 = recall only)",
    )
    ap.add_argument("--model", default=None, help="reader model, any litellm string (default: MEMSCALE_LLM_MODEL)")
    ap.add_argument(
        "--judge-model",
        default=os.environ.get("MEMSCALE_JUDGE_MODEL"),
        help="LLM judge for answer accuracy (default: none = no judge)",
    )
    ap.add_argument("--window", type=int, default=None, help="reader window for the full-context baseline")
    ap.add_argument("--distill", action="store_true", help="run the distill job after ingestion (slow on CPU)")
    ap.add_argument("--conversations", type=int, default=0, help="use only the first N conversations (0 = all)")
    ap.add_argument(
        "--only",
        default=None,
        help="comma-separated sample ids (e.g. conv-26): run these only, "
        "in a database of their own; `python -m bench.tools.locomo_merge` joins such runs",
    )
    ap.add_argument("--out", type=Path, default=RESULTS, help="folder for JSON, markdown and plots")
    ap.add_argument(
        "--ablate",
        default=None,
        help=f"comma-separated ablation variants, 'all' or 'none' (default: all, quick: none); variants: {', '.join(ABLATIONS)}",
    )
    ap.add_argument("--name", default=None, help="result file stem (default locomo / locomo_quick)")
    args = ap.parse_args(argv)
    if args.reader_questions is None:
        args.reader_questions = 1 if args.quick else 20
    args.name = args.name or ("locomo_quick" if args.quick else "locomo")
    args.budgets = [int(b) for b in str(args.budget).split(",")]
    ablate = args.ablate or ("none" if args.quick else "all")
    args.ablations = [] if ablate == "none" else list(ABLATIONS) if ablate == "all" else [a.strip() for a in ablate.split(",")]
    unknown = [a for a in args.ablations if a not in ABLATIONS]
    if unknown:
        ap.error(f"unknown ablation variant(s): {unknown}")
    return args


def reader_sample(items: list[tuple], n: int) -> set[int]:
    """`n` question indices, round-robin over categories, then over conversations (deterministic)."""
    by_cat: dict[int, list[int]] = defaultdict(list)
    for i, (_conv, q) in enumerate(items):
        by_cat[q.category].append(i)
    queues = {c: _round_robin([i for i in ids], items) for c, ids in sorted(by_cat.items())}
    out: list[int] = []
    while len(out) < n and any(queues.values()):
        for c in sorted(queues):
            if queues[c] and len(out) < n:
                out.append(queues[c].pop(0))
    return set(out)


def _round_robin(ids: list[int], items: list[tuple]) -> list[int]:
    per_conv: dict[str, list[int]] = defaultdict(list)
    for i in ids:
        per_conv[items[i][0].sample_id].append(i)
    lists, out = list(per_conv.values()), []
    while any(lists):
        for lst in lists:
            if lst:
                out.append(lst.pop(0))
    return out


def main(argv: list[str] | None = None, *, embedder=None) -> dict:
    from app.config import Settings
    from app.llm.base import LLMError
    from bench.quality.locomo import report
    from bench.quality.locomo.data import load
    from bench.quality.locomo.reader import (
        ANSWER_TOKENS,
        answer_f1,
        clean_answer,
        judge_messages,
        judge_says_correct,
        reader_messages,
    )
    from bench.quality.locomo.run import FullContext, Service, model_window, quick_slice

    args = parse(argv)
    model = args.model or Settings().llm_model
    convs = load(args.data) if args.data else load()
    if args.conversations:
        convs = convs[: args.conversations]
    if args.only:
        convs = [c for c in convs if c.sample_id in args.only.split(",")]
    if args.quick:
        convs = [quick_slice(convs[0], sessions=3, max_questions=10)]
    started = time.perf_counter()
    db_name = (
        "memscale_bench_locomo"
        + ("_quick" if args.quick else "")
        + ("_" + "_".join(c.sample_id.replace("-", "_") for c in convs) if args.only else "")
    )
    svc = Service(db_name, convs, model=model, embedder=embedder)
    methods, reader_methods = method_plan(args.budgets)
    try:
        t0 = time.perf_counter()
        for c in convs:
            svc.ingest(c)
        ingest_s = time.perf_counter() - t0
        svc.settle()
        distill_stats = svc.distill() if args.distill else None
        gw = svc.resources.gateway
        window = args.window or model_window(svc.settings, gw) - 256  # room for instructions and the answer
        full = {c.sample_id: FullContext(c, svc.count, window) for c in convs}
        items = [(c, q) for c in convs for q in c.qa]
        to_read = reader_sample(items, args.reader_questions)
        judge = None
        if args.judge_model:
            from app.llm.gateway import Gateway

            judge = Gateway(args.judge_model, data_dir=svc.settings.data_dir)
        rows = []
        for i, (c, q) in enumerate(items):
            got = {}
            for m in methods:
                if m.startswith("context@"):
                    got[m] = svc.context(c, q, int(m.split("@")[1]))
                elif m == "full":
                    got[m] = full[c.sample_id].retrieved()
                else:
                    got[m] = svc.search(c, q, m)
            ev = q.evidence
            row = {
                "conversation": c.sample_id,
                "category": q.category,
                "question": q.question,
                "answer": q.answer,
                "evidence": ev,
                "methods": {},
            }
            for m, r in got.items():
                rec = {} if m == "full" else {f"recall@{k}": sum(e in r.ranked[:k] for e in ev) / len(ev) for k in RECALL_AT}
                rec["recall_in_context"] = sum(e in r.in_context for e in ev) / len(ev)
                rec.update(tokens=r.tokens, latency_ms=round(r.latency_s * 1000, 2))
                if r.service_tokens is not None:
                    rec["service_tokens"] = r.service_tokens
                if i in to_read and m in reader_methods:
                    try:
                        pred = clean_answer(gw.chat(reader_messages(r.excerpts, q.question), max_tokens=ANSWER_TOKENS))
                    except LLMError as exc:  # recorded as an empty answer, never a crash
                        pred, rec["reader_error"] = "", str(exc)[:200]
                    rec.update(prediction=pred, f1=round(answer_f1(pred, q.answer, q.category), 4))
                    if judge is not None:
                        verdict = judge.chat(judge_messages(q.question, q.answer, pred), max_tokens=4)
                        rec["judge_correct"] = judge_says_correct(verdict)
                row["methods"][m] = rec
            rows.append(row)
            if (i + 1) % 50 == 0:
                print(f"  {i + 1}/{len(items)} questions", flush=True)
        ablation = run_ablations(svc, items, args, rows)
    finally:
        svc.close()
    result = report.summarise(rows, methods=tuple(methods), recall_at=RECALL_AT)
    result.update(
        {
            "benchmark": "locomo",
            "quick": args.quick,
            "data": str(args.data or "shared/data/locomo/locomo_dev.json"),
            "reader_model": model,
            "judge_model": args.judge_model,
            "embedding_model": svc.settings.embedding_model,
            "budget_tokens": args.budgets,
            "reader_window_tokens": window,
            "rag_k": 10,
            "conversations": len(convs),
            "turns": sum(len(c.turns) for c in convs),
            "full_history_tokens_mean": round(sum(f.total_tokens for f in full.values()) / len(full), 1),
            "ingest_seconds": round(ingest_s, 1),
            "distill": distill_stats,
            "ablation": ablation,
            "seconds": round(time.perf_counter() - started, 1),
            "questions_detail": rows,
        }
    )
    report.finish(result, args.out, args.name)
    return result


def _scores(r, ev: list[str]) -> dict:
    rec = {f"recall@{k}": sum(e in r.ranked[:k] for e in ev) / len(ev) for k in RECALL_AT}
    rec.update(
        recall_in_context=sum(e in r.in_context for e in ev) / len(ev), tokens=r.tokens, latency_ms=round(r.latency_s * 1000, 2)
    )
    return rec


def run_ablations(svc, items: list[tuple], args, rows: list[dict]) -> dict | None:
    """Each ranking lever off in turn: hybrid search (and /v1/context at every budget for the
    variants marked so), per question.

    The default variant's figures are the main run's (same questions, same process). Also a
    leave-one-conversation-out choice among the variants (the neighbour and session weights are
    fitted): for each conversation, the variant with the best hybrid recall@10 on the others,
    scored on it."""
    from dataclasses import replace

    from app.search.tuning import DEFAULT_TUNING

    if not args.ablations:
        return None
    ms = [f"context@{b}" for b in args.budgets] + ["hybrid"]
    per_variant = {DEFAULT_VARIANT: [{**r, "methods": {m: r["methods"][m] for m in ms}} for r in rows]}
    for name in args.ablations:
        print(f"  ablation: {name}", flush=True)
        out = []
        changes, with_context = ABLATIONS[name]
        svc.app.state.tuning = replace(DEFAULT_TUNING, **changes)  # the app ranks with these settings
        for c, q in items:
            got = {
                m: svc.context(c, q, int(m.split("@")[1])) if m.startswith("context@") else svc.search(c, q, m)
                for m in ms
                if with_context or m == "hybrid"
            }
            out.append(
                {
                    "conversation": c.sample_id,
                    "category": q.category,
                    "methods": {m: _scores(r, q.evidence) for m, r in got.items()},
                }
            )
        svc.app.state.tuning = DEFAULT_TUNING
        per_variant[name] = out
    return ablation_summary(
        {v: [{k: r[k] for k in ("conversation", "category", "methods")} for r in vr] for v, vr in per_variant.items()}
    )


def ablation_summary(per_variant: dict[str, list[dict]]) -> dict:
    """Aggregates of the ablation's per-question rows (kept in the result, so runs can be merged)."""
    from bench.quality.locomo import report

    result = {
        "variants": {
            v: report.summarise(vr, methods=tuple(m for m in vr[0]["methods"]), recall_at=RECALL_AT)["methods"]
            for v, vr in per_variant.items()
        },
        "rows": per_variant,
    }
    convs = sorted({r["conversation"] for r in per_variant[DEFAULT_VARIANT]})

    def r10(v: str, keep) -> list[float]:
        return [r["methods"]["hybrid"]["recall@10"] for r in per_variant[v] if keep(r["conversation"])]

    def best_without(c: str) -> str:
        """The variant with the best hybrid recall@10 on every conversation but `c`."""
        return max(per_variant, key=lambda v: mean(r10(v, lambda x: x != c)))

    if len(convs) > 1:
        held, chosen = [], {}
        for c in convs:
            best = best_without(c)
            chosen[c] = best
            held += r10(best, lambda x, c=c: x == c)
        result["leave_one_conversation_out"] = {
            "chosen": chosen,
            "hybrid_recall@10": round(mean(held), 4),
            "default_hybrid_recall@10": round(mean(r10(DEFAULT_VARIANT, lambda x: True)), 4),
        }
    return result


if __name__ == "__main__":
    main()
