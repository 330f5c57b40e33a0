"""Pilot: would issue 13's optional LLM step (query rewrite / decomposition) lift LoCoMo recall
with the model this machine has? For each question the configured LLM (the bundled SmolLM2-135M by
default) writes up to three short search queries (two worked examples, then the question); the
question and each of its queries are ranked by `/v1/search` (episodes, k = 10, the real app in
this process over `latency_ab`'s ingested database), and the lists are merged by each turn's best
score, a rewrite's scores weighted by w (w = 1: a plain max; w < 1: a rewrite's hit must beat the
question's own by that margin). Evidence recall@10 per category, the question alone against each
merge, on the same questions in the same run.

    .venv/bin/python -m bench.research.rewrite_pilot [--categories 1,3] [--questions 200] [--reuse]

Nothing of this is in the service: a step that lowers recall with the only model here is not
built (docs/decisions.md, "An LLM query rewrite, measured with the local model"). Results:
bench/results/locomo_rewrite_pilot.json.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

SHOTS = [
    ("When did Jon lose his job?", "Jon lost his job\nJon laid off from work\nJon unemployed looking for work"),
    ("What pets does Anna have?", "Anna's dog\nAnna's cat\nAnna adopted a pet"),
]
ASK = "Write three short search queries, one per line, that find what answers this question.\nQuestion: {q}"
WEIGHTS = (1.0, 0.9, 0.8)


def messages(question: str) -> list[dict]:
    out = []
    for q, a in SHOTS:
        out += [{"role": "user", "content": ASK.format(q=q)}, {"role": "assistant", "content": a}]
    return out + [{"role": "user", "content": ASK.format(q=question)}]


def rewrites(raw: str, question: str, n: int = 3) -> list[str]:
    """Up to `n` distinct queries from the model's answer (list marks dropped; the question itself,
    empty and overlong lines skipped)."""
    seen, out = {question.strip().lower()}, []
    for line in raw.splitlines():
        line = re.sub(r"^\s*(?:[-*\u2022]|\d+[.)])\s*", "", line).strip().strip('"')
        if 3 <= len(line) <= 200 and line.lower() not in seen:
            seen.add(line.lower())
            out.append(line)
    return out[:n]


def merged(base: list[tuple[str, float]], runs: list[list[tuple[str, float]]], w: float, k: int = 10) -> list[str]:
    """The top `k` ids by best score: the question's own, or w x a rewrite's."""
    best = dict(base)
    for run in runs:
        for id_, s in run:
            best[id_] = max(best.get(id_, 0.0), w * s)
    return [i for i, _ in sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]


def main(argv: list[str] | None = None) -> dict:
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.main import create_app
    from bench.common import pct, write_result
    from bench.tools.locomo_latency_ab import evidence_recall, ingested

    ap = argparse.ArgumentParser(
        prog="python -m bench.research.rewrite_pilot", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--categories", default="1,3", help="LoCoMo categories (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop)"
    )
    ap.add_argument("--questions", type=int, default=0, help="a random sample of this many (0: all of those categories)")
    ap.add_argument("--reuse", action="store_true", help="reuse the database of an earlier latency_ab run")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)

    convs, s, keys, dia = ingested(a.reuse)
    cats = {int(x) for x in a.categories.split(",")}
    qs = [(c.sample_id, q) for c in convs for q in c.qa if q.category in cats]
    if a.questions:
        random.seed(2)
        qs = random.sample(qs, min(a.questions, len(qs)))
    arms = ["question"] + [f"merged w={w}" for w in WEIGHTS]
    rec: dict = {c: {arm: [] for arm in arms} for c in sorted(cats)}
    llm_s, produced, examples = [], 0, []
    # the LLM asked is the configured one (MEMSCALE_LLM_MODEL), whoever built the database
    app = create_app(s.model_copy(update={"rate_limit_per_minute": 0, "llm_model": Settings().llm_model}))
    with TestClient(app) as client:
        gateway = app.state.resources.gateway

        def search(sid: str, query: str) -> list[tuple[str, float]]:
            r = client.post(
                "/v1/search",
                json={"query": query, "types": ["episode"], "k": 10},
                headers={"Authorization": f"Bearer {keys[sid]}"},
            )
            if r.status_code != 200:
                raise RuntimeError(f"{r.status_code} {r.text[:300]}")
            return [(x["id"], x["score"]) for x in r.json()["results"]]

        for i, (sid, q) in enumerate(qs):
            t = time.perf_counter()
            subs = rewrites(gateway.chat(messages(q.question), max_tokens=60), q.question)
            llm_s.append(time.perf_counter() - t)
            produced += bool(subs)
            base = search(sid, q.question)
            runs = [search(sid, x) for x in subs]
            lists = {"question": [id_ for id_, _ in base]} | {f"merged w={w}": merged(base, runs, w) for w in WEIGHTS}
            for arm, ids in lists.items():
                top = {dia.get(x) for x in ids}
                rec[q.category][arm].append(evidence_recall(q, top))
            if len(examples) < 12:
                examples.append({"question": q.question, "rewrites": subs})
            if (i + 1) % 25 == 0:
                print(i + 1, "questions", flush=True)
    out = {
        "model": gateway.model,
        "questions": len(qs),
        "with_rewrites": produced,
        "llm_s_p50": round(pct(llm_s, 50), 2),
        "llm_s_p95": round(pct(llm_s, 95), 2),
        "load": " ".join(open("/proc/loadavg").read().split()[:3]),
        "recall_at_10": {},
        "examples": examples,
    }
    for c, by_arm in rec.items():
        out["recall_at_10"][str(c)] = {arm: round(sum(v) / len(v), 3) for arm, v in by_arm.items() if v}
        out["recall_at_10"][str(c)]["n"] = len(by_arm["question"])
    every = {arm: [x for c in rec for x in rec[c][arm]] for arm in arms}
    out["recall_at_10"]["all"] = {arm: round(sum(v) / len(v), 3) for arm, v in every.items()} | {"n": len(qs)}
    for c, row in out["recall_at_10"].items():
        print(f"category {c}: " + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    print(f"LLM p50 {out['llm_s_p50']} s, p95 {out['llm_s_p95']} s; rewrites for {produced}/{len(qs)}", flush=True)
    write_result("locomo_rewrite_pilot", out, a.out)
    return out


if __name__ == "__main__":
    main()
