"""What each stage of a `/v1/search` request costs at LoCoMo scale, and what it buys: one API
process in this process (FastAPI's test client, the real app over the ingested LoCoMo database of
`latency_ab`), every question asked once per variant, the variants interleaved question by
question in a rotating order, so machine load hits them alike. Per variant: latency p50/p95 of
the whole request (in process: no socket; HTTP adds ~2-5 ms) and evidence recall@10 over the
questions asked (the same rule as `memscale bench locomo`).

    .venv/bin/python -m bench.speed.locomo_stages [--questions 200] [--reuse]

Variants: the ranking as configured; the query's vector handed in (what embedding it costs the
request); the vector computed before the text pass instead of beside it; the ranking without the
vocabulary lift, without the neighbour and session signals, without any of those nor the time
window ("lean"), and lean with the vector handed in. Results: bench/results/locomo_stages.json.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from dataclasses import replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

LEAN = {"vocab_terms": 0, "neighbour": 0.0, "session": 0.0, "time_weight": 0.0}
VARIANTS = {  # label: (ranking changes, how the query's vector is had)
    "as configured": ({}, "beside"),
    "query vector given": ({}, "given"),
    "query embedded first": ({}, "first"),
    "no vocabulary lift": ({"vocab_terms": 0}, "beside"),
    "no neighbour/session signals": ({"neighbour": 0.0, "session": 0.0}, "beside"),
    "lean (none of the three, no time window)": (LEAN, "beside"),
    "lean, query vector given": (LEAN, "given"),
}


def main(argv: list[str] | None = None) -> dict:
    from fastapi.testclient import TestClient

    import app.search.prepare as prepare
    from app.main import create_app
    from app.search.tuning import DEFAULT_TUNING
    from bench.common import pct, write_result
    from bench.tools.locomo_latency_ab import evidence_recall, ingested

    ap = argparse.ArgumentParser(
        prog="python -m bench.speed.locomo_stages", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--reuse", action="store_true", help="reuse the database of an earlier latency_ab run")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)

    convs, s, keys, dia = ingested(a.reuse)
    qs = [(c.sample_id, q) for c in convs for q in c.qa if q.category in (1, 2, 3, 4)]
    random.seed(1)
    picked = random.sample(qs, a.questions + 10)
    warm, sample = picked[:10], picked[10:]
    base, embed_query = DEFAULT_TUNING, prepare.embed_query
    app = create_app(s.model_copy(update={"rate_limit_per_minute": 0}))
    lat = {v: [] for v in VARIANTS}
    rec = {v: [] for v in VARIANTS}
    with TestClient(app) as client:
        embedder = app.state.embedder
        given = {q.question: embedder.embed_queries([q.question])[0] for _, q in picked}

        def ask(variant: str, sid: str, q) -> None:
            changes, how = VARIANTS[variant]
            app.state.tuning = replace(base, **changes)
            prepare.embed_query = {
                "beside": embed_query,
                "given": lambda db, p, e, query: given[query],
                "first": lambda db, p, e, query: e.embed_queries([query])[0],
            }[how]
            t = time.perf_counter()
            r = client.post(
                "/v1/search",
                json={"query": q.question, "types": ["episode"], "k": 10},
                headers={"Authorization": f"Bearer {keys[sid]}"},
            )
            ms = (time.perf_counter() - t) * 1000
            if r.status_code != 200:
                raise RuntimeError(f"{variant}: {r.status_code} {r.text[:300]}")
            top = {dia.get(x["id"]) for x in r.json()["results"]}
            lat[variant].append(ms)
            rec[variant].append(evidence_recall(q, top))

        try:
            for sid, q in warm:  # the first requests load models and warm caches: not measured
                for v in VARIANTS:
                    ask(v, sid, q)
            for v in VARIANTS:
                lat[v].clear()
                rec[v].clear()
            names = list(VARIANTS)
            for i, (sid, q) in enumerate(sample):
                for v in names[i % len(names) :] + names[: i % len(names)]:
                    ask(v, sid, q)
        finally:
            app.state.tuning, prepare.embed_query = base, embed_query
    out = {"questions": a.questions, "load": " ".join(open("/proc/loadavg").read().split()[:3]), "variants": {}}
    for v in VARIANTS:
        row = {
            "p50_ms": round(pct(lat[v], 50), 1),
            "p95_ms": round(pct(lat[v], 95), 1),
            "recall_at_10": round(sum(rec[v]) / len(rec[v]), 3),
        }
        out["variants"][v] = row
        print(f"{v:45s} p50 {row['p50_ms']:6.1f}  p95 {row['p95_ms']:6.1f}  r@10 {row['recall_at_10']:.3f}", flush=True)
    write_result("locomo_stages", out, a.out)
    return out


if __name__ == "__main__":
    main()
