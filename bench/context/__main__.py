"""bench/context on LoCoMo dev: tokens per /v1/context vs. the full history, evidence found in the
context (model-independent), and /v1/context latency.

    .venv/bin/python -m bench.context [--budget 1000] [--limit 0]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from bench.common import fresh_database, summary_ms, write_result
from bench.locomo import load


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=1000)
    ap.add_argument("--limit", type=int, default=0, help="questions per conversation (0 = all)")
    ap.add_argument("--data", default=None)
    args = ap.parse_args()

    from app.jobs.runner import Resources
    from app.main import create_app
    from app.orgs import service as orgs

    convs = load(args.data) if args.data else load()
    settings = fresh_database("memscale_bench_ctx").model_copy(update={"log_level": "WARNING", "max_batch_items": 1000})
    admin = create_engine(settings.database_url)
    with Session(admin, expire_on_commit=False) as db:
        org = orgs.create_org(db, "locomo")
        keys = {c.sample_id: orgs.create_key(db, orgs.create_user(db, org, c.sample_id)) for c in convs}
        db.commit()
    res = Resources(settings)
    app = create_app(settings, embedder=res.embedder)
    count = res.gateway.count_tokens
    lat, ratio, tokens, recall = [], [], [], defaultdict(list)
    full_tokens = {}
    with TestClient(app) as client:
        t0 = time.perf_counter()
        dia_of: dict[str, str] = {}
        for c in convs:
            h = {"Authorization": f"Bearer {keys[c.sample_id]}"}
            items = [{"kind": "conversation", "content": t.text, "session_id": f"{c.sample_id}-s{t.session}",
                      "occurred_at": (t.at + timedelta(seconds=i)).isoformat() + "Z" if t.at else None,
                      "metadata": {"dia_id": t.dia_id}} for i, t in enumerate(c.turns)]
            ids = client.post("/v1/episodes/batch", json={"items": items}, headers=h).json()["ids"]
            dia_of.update({i: t.dia_id for i, t in zip(ids, c.turns)})
            full_tokens[c.sample_id] = count("\n".join(t.text for t in c.turns))
        ingest_s = time.perf_counter() - t0
        for c in convs:
            h = {"Authorization": f"Bearer {keys[c.sample_id]}"}
            for q in c.qa[: args.limit or None]:
                t1 = time.perf_counter()
                r = client.post("/v1/context", json={"query": q.question, "budget_tokens": args.budget}, headers=h)
                lat.append(time.perf_counter() - t1)
                ctx = r.json()
                tokens.append(ctx["tokens"])
                ratio.append(ctx["tokens"] / full_tokens[c.sample_id])
                found = {dia_of.get(i["id"]) for s in ctx["sections"] for i in s["items"]}
                recall[q.category].append(sum(e in found for e in q.evidence) / len(q.evidence))
    allr = [x for v in recall.values() for x in v]
    result = {"budget_tokens": args.budget, "questions": len(allr), "turns": sum(len(c.turns) for c in convs),
              "ingest_seconds": round(ingest_s, 1), "full_history_tokens_mean": round(sum(full_tokens.values()) / len(full_tokens)),
              "context_tokens_mean": round(sum(tokens) / len(tokens), 1),
              "context_share_of_full_history": round(sum(ratio) / len(ratio), 4),
              "context_latency": summary_ms(lat),
              "evidence_in_context": {"all": round(sum(allr) / len(allr), 4),
                                      **{f"cat{k}": round(sum(v) / len(v), 4) for k, v in sorted(recall.items())}}}
    print(f"\nbench/context  LoCoMo dev: {result['questions']} questions over {result['turns']} turns, budget {args.budget}")
    print(f"  full history {result['full_history_tokens_mean']} tokens/conversation; context {result['context_tokens_mean']} "
          f"tokens = {result['context_share_of_full_history']:.1%} of it")
    print(f"  /v1/context latency p50 {result['context_latency']['p50_ms']} ms, p95 {result['context_latency']['p95_ms']} ms")
    print(f"  evidence turns inside the context: {result['evidence_in_context']}")
    print("  written", write_result("context", result))


if __name__ == "__main__":
    main()
