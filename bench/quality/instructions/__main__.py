"""Score the instruction interpreter on the labelled set: per-field accuracy, exact match, latency.

    .venv/bin/python -m bench.quality.instructions [--split dev|heldout|all] [--llm] [--model local/smollm2] [--show]

Per-field accuracy: share of pairs whose field equals the label (lists as sets, dates as ISO
days, unset = unset). Exact match: every field right. `ignored` is scored as "listed something
or not". `--llm` runs the LLM interpreter (deterministic reading + the model for unset fields, asked
only when the rules left words over) with the configured or given model: the same scores, how
many pairs called the model, and the added latency per pair (all pairs; a pair without a call
adds ~0). Latency: the deterministic interpreter alone, per call. Load averages are recorded.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from statistics import mean, quantiles

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def reading(filters, terms: list[str], ignored: list[str]) -> dict:
    from bench.quality.instructions.data import FIELDS, LIST_FIELDS

    out: dict = {}
    for f in FIELDS:
        if f == "ignored":
            out[f] = bool(ignored)
        elif f == "terms":
            out[f] = tuple(sorted(set(terms))) or None
        elif f in LIST_FIELDS:
            v = getattr(filters, f)
            out[f] = tuple(sorted({x.lower() for x in v})) if v else None
        else:
            v = getattr(filters, f)
            out[f] = None if v is None else (v.date().isoformat() if hasattr(v, "date") and f != "owner" else str(v))
    return out


def score(pairs, readings: list[dict]) -> dict:
    from bench.quality.instructions.data import FIELDS

    per = {f: round(mean(float(r[f] == p.expected[f]) for p, r in zip(pairs, readings)), 4) for f in FIELDS}
    exact = mean(float(all(r[f] == p.expected[f] for f in FIELDS)) for p, r in zip(pairs, readings))
    return {
        "pairs": len(pairs),
        "exact_match": round(exact, 4),
        "per_field_mean": round(mean(per.values()), 4),
        "per_field_min": min(per.values()),
        "per_field": per,
    }


def main(argv: list[str] | None = None) -> dict:
    from app.search.dates import warm_up
    from app.search.instruction import interpret
    from app.search.instruction_llm import interpret_llm
    from bench.command import parser, save
    from bench.common import RESULTS
    from bench.quality.instructions.data import NOW, load

    ap = parser(__doc__, None)
    ap.add_argument("--split", choices=["dev", "heldout", "all"], default="dev")
    ap.add_argument("--llm", action="store_true")
    ap.add_argument("--model", default=None)
    ap.add_argument("--limit", type=int, default=None, help="only the first N pairs of the split (slow models)")
    ap.add_argument("--show", action="store_true", help="print every pair the interpreter got wrong")
    ap.add_argument(
        "--out", type=Path, default=None, help="the JSON result (default: bench/results/instructions_<split>[_llm].json)"
    )
    a = ap.parse_args(argv)
    pairs = [p for p in load() if a.split == "all" or p.split == a.split][: a.limit]
    warm_up()
    result: dict = {
        "benchmark": "instructions",
        "split": a.split,
        "limit": a.limit,
        "reference_now": NOW.isoformat(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    readings, times = [], []
    for p in pairs:
        t0 = time.perf_counter()
        f, terms, ignored = interpret(p.instruction, now=NOW)
        times.append((time.perf_counter() - t0) * 1000)
        readings.append(reading(f, terms, ignored))
    result["deterministic"] = score(pairs, readings)
    lat = [(time.perf_counter(), interpret(p.instruction, now=NOW))[0] for p in pairs]  # second pass, warm
    del lat
    times2 = []
    for _ in range(5):
        for p in pairs:
            t0 = time.perf_counter()
            interpret(p.instruction, now=NOW)
            times2.append((time.perf_counter() - t0) * 1000)
    q = quantiles(times2, n=100)
    result["latency_ms"] = {
        "calls": len(times2),
        "p50": round(q[49], 3),
        "p95": round(q[94], 3),
        "p99": round(q[98], 3),
        "max": round(max(times2), 3),
    }
    if a.show:
        _show(pairs, readings)
    if a.llm:
        from app.config import Settings
        from app.jobs.runner import Resources

        settings = Settings()
        if a.model:
            settings = settings.model_copy(update={"llm_model": a.model})
        gw = Resources(settings).gateway
        t0 = time.perf_counter()
        gw.chat([{"role": "user", "content": "Hi"}], max_tokens=1)  # loads the model: not an instruction's cost
        result_load_s = round(time.perf_counter() - t0, 1)
        llm_readings, added, per_call = [], [], []
        for p in pairs:
            before = gw.stats.calls
            t0 = time.perf_counter()
            f, terms, ignored = interpret_llm(gw, p.instruction, now=NOW)
            ms = (time.perf_counter() - t0) * 1000
            added.append(ms)
            if gw.stats.calls > before:
                per_call.append(ms)
            llm_readings.append(reading(f, terms, ignored))
        stats = gw.stats.as_dict()
        q = quantiles(added, n=100) if len(added) > 1 else [added[0]] * 99
        result["with_llm"] = {
            "model": settings.llm_model,
            **score(pairs, llm_readings),
            "model_load_s": result_load_s,
            "llm_calls": len(per_call),
            "added_ms_all_pairs": {
                "mean": round(mean(added), 1),
                "p50": round(q[49], 1),
                "p95": round(q[94], 1),
                "max": round(max(added), 1),
            },
            "ms_per_llm_call_mean": round(mean(per_call), 1) if per_call else None,
            "prompt_tokens_mean": round(stats["prompt_tokens"] / max(1, stats["calls"] - 1), 1),
            "completion_tokens_mean": round(stats["completion_tokens"] / max(1, stats["calls"] - 1), 1),
            "load_after": [round(x, 2) for x in os.getloadavg()],
        }
        if a.show:
            _show(pairs, llm_readings)
    print(json.dumps({k: v for k, v in result.items()}, indent=1))
    return save(a.out or RESULTS / f"instructions_{a.split}{'_llm' if a.llm else ''}.json", result, indent=1)


def _show(pairs, readings) -> None:
    for p, r in zip(pairs, readings):
        wrong = {f: (r[f], p.expected[f]) for f in r if r[f] != p.expected[f]}
        if wrong:
            print(f"[{p.n}] {p.instruction!r}: " + "; ".join(f"{f}: got {g} want {w}" for f, (g, w) in wrong.items()))


if __name__ == "__main__":
    main()
