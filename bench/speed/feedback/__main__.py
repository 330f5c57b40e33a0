"""What feedback costs search and context: an org of `--n` org-visible memories, `--voters` users
who searched and marked the memories handed out helpful or wrong (1 in 5 wrong) and asked for
contexts and marked the best item used, then the same queries with feedback read (the default:
the utility signal, and the context's calibration of where it ends) and not read
(`utility_weight` 0, the calibration not consulted), the arms interleaved query by query in one
process, so that both see the same machine load. Timed apart, inside each request of the "on" arm:
the feedback calls themselves (`feedback.from_pool`: the votes read with the pool's rows, in
Python; `calibration.context_cut`: the read of where the org's contexts end), the share of the
difference that does not drown in the machine's noise. The votes' SQL runs inside the memory
pool's statement (app/search/repository/vector.py): it shows in the side-by-side difference only.
A context reads its cut while the query's embedding is computed beside it, so the cut's time
inside overlaps the embedding's: an upper bound of what it adds. `paired`: the per-query
differences (on minus off, the same query a few milliseconds apart), less moved by the load's
swings than the difference of two arms' percentiles.

    .venv/bin/python -m bench.speed.feedback [--n 1000] [--voters 5] [--queries 100]

Results: stdout and bench/results/feedback_cost.json (or `--out`).
"""

from __future__ import annotations

import argparse
import os
import random
import time
from dataclasses import replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--voters", type=int, default=5)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from fastapi.testclient import TestClient
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from app.feedback import calibration
    from app.feedback import service as feedback
    from app.main import create_app
    from app.orgs import service as orgs
    from app.search.tuning import DEFAULT_TUNING
    from bench.common import arm_row, fresh_database, load_average, write_result
    from bench.speed.service.data import query, sentence

    rng = random.Random(args.seed)
    settings = fresh_database("memscale_bench_feedback").model_copy(update={"log_level": "WARNING"})
    admin = create_engine(settings.database_url)
    with Session(admin) as db:
        org = orgs.create_org(db, "feedback-bench")
        keys = [orgs.create_key(db, orgs.create_user(db, org, f"u{i}")) for i in range(args.voters + 1)]
        db.commit()
    heads = [{"Authorization": f"Bearer {k}"} for k in keys]
    app = create_app(settings)
    votes = 0
    with TestClient(app) as http:
        for _ in range(args.n):
            r = http.post("/v1/memories", json={"text": sentence(rng), "kind": "fact", "visibility": "org"}, headers=heads[0])
            assert r.status_code == 201, r.text
        for h in heads[1:]:
            for _ in range(20):
                found = http.post("/v1/search", json={"query": query(rng), "types": ["memory"]}, headers=h).json()
                items = [
                    {"type": "memory", "id": x["id"], "signal": "wrong" if rng.random() < 0.2 else "helpful"}
                    for x in found["results"]
                ]
                if items:
                    assert (
                        http.post(
                            "/v1/feedback", json={"retrieval_id": found["retrieval_id"], "items": items}, headers=h
                        ).status_code
                        == 201
                    )
                    votes += len(items)
            for _ in range(10):  # feedback on contexts: the org's calibration of where a context ends
                ctx = http.post("/v1/context", json={"query": query(rng), "budget_tokens": 1000}, headers=h).json()
                got = [i for sec in ctx["sections"] for i in sec["items"] if i.get("id")]
                if got:
                    best = max(got, key=lambda i: i["score"])
                    body = {
                        "retrieval_id": ctx["retrieval_id"],
                        "items": [{"type": best["type"], "id": best["id"], "signal": "used"}],
                    }
                    assert http.post("/v1/feedback", json=body, headers=h).status_code == 201
                    votes += 1
        read_calibration, read_utility = calibration.context_cut, feedback.from_pool
        spent: list[float] = []  # ms of feedback calls in the current request (any thread)

        def timed(fn):
            def call(*a, **k):
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    spent.append((time.perf_counter() - t0) * 1000)

            return call

        feedback.from_pool = timed(read_utility)
        arms = {"on": DEFAULT_TUNING, "off": replace(DEFAULT_TUNING, utility_weight=0.0)}
        times: dict = {f"{kind} {arm}": [] for kind in ("search", "context") for arm in arms}
        inside: dict = {"search": [], "context": []}
        qs = [query(rng) for _ in range(args.queries)]
        for i, q in enumerate(qs):
            order = list(arms) if i % 2 == 0 else list(reversed(arms))
            for arm in order:
                app.state.tuning = arms[arm]
                calibration.context_cut = timed(read_calibration) if arm == "on" else (lambda db, org_id: None)
                for kind, path, body in (
                    ("search", "/v1/search", {"query": q, "types": ["memory"]}),
                    ("context", "/v1/context", {"query": q, "budget_tokens": 1000}),
                ):
                    spent.clear()
                    t0 = time.perf_counter()
                    assert http.post(path, json=body, headers=heads[0]).status_code == 200
                    times[f"{kind} {arm}"].append((time.perf_counter() - t0) * 1000)
                    if arm == "on":
                        inside[kind].append(sum(spent))
    calibration.context_cut, feedback.from_pool = read_calibration, read_utility
    admin.dispose()
    result = {
        "n": args.n,
        "voters": args.voters,
        "votes_given": votes,
        "queries": args.queries,
        "search": arm_row({"new": times["search on"], "old": times["search off"]}, 2),
        "context": arm_row({"new": times["context on"], "old": times["context off"]}, 2),
        "feedback_calls": {kind: arm_row({"inside": v}, 3)["inside"] for kind, v in inside.items()},
        "paired": {
            kind: arm_row({"on_minus_off": [a - b for a, b in zip(times[f"{kind} on"], times[f"{kind} off"])]}, 2)["on_minus_off"]
            for kind in ("search", "context")
        },
        "load": load_average(),
    }
    for kind in ("search", "context"):
        row = result[kind]
        print(
            f"{kind:8s} feedback read p50/p95 {row['new']['p50_ms']}/{row['new']['p95_ms']} ms, "
            f"not read {row['old']['p50_ms']}/{row['old']['p95_ms']} ms; the feedback calls inside "
            f"{result['feedback_calls'][kind]['p50_ms']}/{result['feedback_calls'][kind]['p95_ms']} ms; "
            f"per query, on minus off {result['paired'][kind]['p50_ms']}/{result['paired'][kind]['p95_ms']} ms"
        )
    print("load", result["load"])
    print("written", write_result("feedback_cost", result, args.out))


if __name__ == "__main__":
    main()
