"""/v1/search and /v1/context latency over HTTP at LoCoMo scale (2,760 turns, 5 private users),
ranking before (RRF at k-dependent depth), without the second round, and now, interleaved twice
so all see the same load.

    .venv/bin/python -m bench.research.locomo_ranking_latency
"""

from __future__ import annotations

import os
import random
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
from dataclasses import replace

import httpx

from app.search.tuning import DEFAULT_TUNING
from bench.common import pct, serve_in_thread
from bench.quality.locomo.data import load
from bench.quality.locomo.run import Service


def main() -> None:
    convs = load()
    svc = Service("memscale_bench_locomo_latency", convs, model="local/smollm2")
    t0 = time.perf_counter()
    for c in convs:
        svc.ingest(c)
    print("ingest s", round(time.perf_counter() - t0, 1), "turns", sum(len(c.turns) for c in convs))
    svc.settle()
    base = serve_in_thread(svc.app)
    qs = [(c.sample_id, q.question) for c in convs for q in c.qa]
    random.seed(1)
    sample = random.sample(qs, 120)
    http = httpx.Client(base_url=base, timeout=30)

    def h(sid):
        return {"Authorization": f"Bearer {svc.clients[sid].api_key}"}

    def run(label):
        for sid, q in sample[:5]:  # warm-up
            http.post("/v1/search", json={"query": q, "types": ["episode"]}, headers=h(sid))
        out = {}
        for name, path, body in (
            ("search", "/v1/search", lambda q: {"query": q, "types": ["episode"], "k": 10}),
            ("search all types", "/v1/search", lambda q: {"query": q, "k": 10}),
            ("context 1000", "/v1/context", lambda q: {"query": q, "budget_tokens": 1000}),
        ):
            lat = []
            for sid, q in sample:
                t = time.perf_counter()
                r = http.post(path, json=body(q), headers=h(sid))
                lat.append((time.perf_counter() - t) * 1000)
                assert r.status_code == 200, r.text
            out[name] = (round(pct(lat, 50), 1), round(pct(lat, 95), 1))
        print(label, out, flush=True)

    variants = (
        ("before (rrf, k-dependent depth)", {"fusion": "rrf", "pool": None}),
        ("no second round", {"expand_terms": 0}),
        ("after (default)", {}),
    )
    for _rep in range(2):
        for label, changes in variants:
            svc.app.state.tuning = replace(DEFAULT_TUNING, **changes)
            run(label)
    svc.app.state.tuning = DEFAULT_TUNING
    svc.close()


if __name__ == "__main__":
    main()
