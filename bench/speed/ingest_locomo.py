"""The LoCoMo ingest rate through the API beside the bare model, with and without the public word
list's table (the ingest profile's --locomo; see bench/speed/ingest_profile.py)."""

from __future__ import annotations

import time

from bench.speed.ingest_profile import _print


def locomo_rate(path: str | None, n: int, word_vectors: str = "on", rounds: int = 1) -> dict:
    """LoCoMo's first `n` conversations through POST /v1/episodes/batch in process (one batch per
    conversation, as `memscale bench locomo` ingests them), each conversation's turns first
    embedded alone in batches of 250 by the bare model: turns/s both ways and the ratio.
    `word_vectors`: with the public word list's table (on, as served), without it (off), or
    `rounds` alternating pairs of passes without and with it (ab), each pass into a fresh database."""
    from app.config import Settings
    from app.kit.runtime import wordvectors
    from app.kit.runtime.embedding import make_embedder
    from app.kit.stages import Stages
    from bench.quality.locomo.data import load

    convs = (load(path) if path else load())[:n]
    emb = make_embedder(Settings())
    table = getattr(emb, "word_vectors", None)
    wordvectors.ensure(emb, say=print)  # built once per model, before anything is timed
    modes = {"on": [True], "off": [False], "ab": [False, True] * rounds}[word_vectors]
    runs, recs = {True: [], False: []}, {True: Stages(), False: Stages()}  # each mode's passes record into one
    for on in modes:
        emb.word_vectors = table if on else None
        runs[on].append(_locomo_pass(convs, emb, recs[on]))
        r = runs[on][-1]
        print(f"pass {'with' if on else 'without'} word vectors: x{r['took'] / r['alone']:.2f} the model", flush=True)
    on = word_vectors != "off"
    out = _locomo_summary(convs, runs[on], recs[on])
    if word_vectors == "ab":
        out["without_word_vectors"] = _locomo_summary(convs, runs[False], recs[False])
    return out


def _locomo_pass(convs, emb, rec) -> dict:
    from app.config import Settings
    from bench.quality.locomo.run import Service

    svc = Service("memscale_bench_ingest_locomo", convs, model=Settings().llm_model, embedder=emb)
    alone = took = 0.0
    try:
        svc.clients[convs[0].sample_id].search("warm up")
        emb.embed([t.text for t in convs[0].turns[:32]])  # the batch path's first call loads its session
        _record_requests(svc.app, rec)
        for c in convs:
            texts = [t.text for t in c.turns]
            t0 = time.perf_counter()
            for i in range(0, len(texts), 250):
                emb.embed(texts[i : i + 250])
            alone += time.perf_counter() - t0
            t0 = time.perf_counter()
            svc.ingest(c)
            took += time.perf_counter() - t0
    finally:
        svc.close()
    return {"alone": alone, "took": took}


def _locomo_summary(convs, runs: list[dict], rec) -> dict:
    n, alone, took = len(convs), sum(r["alone"] for r in runs), sum(r["took"] for r in runs)
    turns = sum(len(c.turns) for c in convs) * len(runs)
    out = {
        "conversations": n,
        "passes": len(runs),
        "turns": turns,
        "embedder_alone_turns_s": round(turns / alone, 1),
        "ingest_turns_s": round(turns / took, 1),
        "ingest_over_embedder": round(alone / took, 3),
        "per_pass": [round(r["alone"] / r["took"], 3) for r in runs],
    }
    print(
        f"\nLoCoMo ingest, {n} conversations x {len(runs)} passes ({turns} turns): embedder alone "
        f"{out['embedder_alone_turns_s']} turns/s, through the API {out['ingest_turns_s']} turns/s = "
        f"{100 * out['ingest_over_embedder']:.0f} %",
        flush=True,
    )
    batches = n * len(runs)
    case = {
        "org": "locomo",
        "batch": turns // max(1, batches),
        "repeats": batches,
        "total_ms": round(1000 * took / batches, 1),
        "embedder_alone_ms": round(1000 * alone / batches, 1),
        "ratio": round(took / alone, 2),
        "stages_ms": {k: round(1000 * v / batches, 1) for k, v in rec.seconds.items()},
        "calls": {k: round(v / batches, 1) for k, v in rec.calls.items()},
    }
    _print(case)
    out["stages"] = case
    return out


def _record_requests(app, rec) -> None:
    """Record the stages of every later request to `app` into `rec` (the whole request as `request`,
    less the stages inside it: the HTTP layer, JSON and the body's parse)."""
    from app.kit.stages import recording, stage

    inner = app.middleware_stack  # built by the first request

    async def recorded(scope, receive, send):
        with recording(rec), stage("request"):
            await inner(scope, receive, send)

    app.middleware_stack = recorded
