"""bench/speed/inference_fairness: another tenant's /v1/generate latency, unloaded and under one tenant's
flood, side by side in one run (the target: p95 under the flood at most 3 x unloaded).

    .venv/bin/python -m bench.speed.inference_fairness [--requests 12] [--rounds 2] [--flooders 4] [--arms fair,hold]

The real tier in this process (uvicorn on loopback, real HTTP, handoff tokens), the real
SmolLM2-135M on CPU with 1 torch thread. For each arm, on a fresh app over the same loaded model:

1. unloaded: the victim (org b, a fresh handoff token per request, as each /v1/context gives)
   sends short requests back to back (~130 prompt tokens, 16 new tokens);
2. flood: ``--flooders`` concurrent loops of org a on ONE token send long requests (~1,200 prompt
   tokens, 48 new tokens) while the victim sends the same requests again; then the flood stops
   and its requests in flight drain.
``--rounds`` quiet / flood blocks alternate (``--requests`` victim requests per phase in all), so
that the load of other processes on a shared machine drifts over both phases alike.

Arms: ``fair`` (the default scheduler: quantum 50 ms, least-served org first) and ``hold`` (the
same scheduler with an endless quantum: a request keeps the engine to its end, as the global lock
did). Reports the victim's p50/p95 per phase, the ratio, the flooder's statuses, to stdout and
bench/results/inference_fairness.json (+ .md).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.command import parser, save
from bench.common import free_port, load_average, summary_ms

KEY = b"bench-inference-fairness-key"
VICTIM = (
    "Notes: the Plimton observatory opens at dusk. Dr. Anna Kell found comet K-17 there in 2011; "
    "it returns every 43 years and its tail looks green. "
) * 2 + "Question: who found comet K-17, and when?"
FLOOD = " ".join(f"Record {i}: the crate in row {i % 17} holds {i * 3} blue stones and {i % 5} red ones." for i in range(48))


def _serve(app):
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}"


def _bearer(org: str, sub: str) -> dict:
    from app.kit.runtime.signing import sign

    return {"Authorization": f"Bearer {sign(KEY, org=org, sub=sub, chunks=[], cartridges=[], ttl_s=3600)}"}


def _victim(base: str, n: int, tag: str) -> tuple[list[float], list]:
    lat, errors = [], []
    with httpx.Client(base_url=base, timeout=600) as c:
        for i in range(n):
            t0 = time.perf_counter()
            r = c.post(
                "/v1/generate", json={"prompt": VICTIM, "max_tokens": 16, "mode": "full"}, headers=_bearer("org-b", f"{tag}-{i}")
            )
            (lat if r.status_code == 200 else errors).append(time.perf_counter() - t0 if r.status_code == 200 else r.status_code)
    return lat, errors


def _flood(base: str, stop: threading.Event, out: list) -> None:
    token = _bearer("org-a", "flooder")  # one token, one org
    with httpx.Client(base_url=base, timeout=600) as c:
        while not stop.is_set():
            t0 = time.perf_counter()
            r = c.post("/v1/generate", json={"prompt": FLOOD, "max_tokens": 48, "mode": "full"}, headers=token)
            out.append((r.status_code, round(time.perf_counter() - t0, 2), r.headers.get("retry-after")))
            if r.status_code == 429:
                time.sleep(float(r.headers.get("retry-after", 1)))


def run_arm(engine, arm: str, requests: int, flooders: int, rounds: int) -> dict:
    from app.inference.scheduler import SchedulerConfig
    from app.inference.server import ServerConfig, create_app
    from app.inference.store import ChunkStore, StoreConfig

    schedule = SchedulerConfig() if arm == "fair" else SchedulerConfig(quantum_s=1e9)
    root = Path(tempfile.mkdtemp(prefix="fairbench"))
    app = create_app(
        ServerConfig(engine=engine.config, store_root=root, schedule=schedule),
        engine=engine,
        store=ChunkStore(engine, StoreConfig(root=root)),
        key=KEY,
    )
    server, thread, base = _serve(app)
    unloaded, loaded, errors, flood, drains = [], [], [], [], []
    per_round = max(1, requests // rounds)
    try:
        _victim(base, 2, f"{arm}-warm")  # warm-up, not counted
        for r in range(rounds):  # quiet and flood blocks alternate, so the machine's drift hits both
            lat, err = _victim(base, per_round, f"{arm}-quiet{r}")
            unloaded += lat
            errors += err
            stop = threading.Event()
            loops = [threading.Thread(target=_flood, args=(base, stop, flood)) for _ in range(flooders)]
            for t in loops:
                t.start()
            time.sleep(3.0)  # the flood holds the engine before the victim starts
            lat, err = _victim(base, per_round, f"{arm}-flood{r}")
            loaded += lat
            errors += err
            stop.set()
            t_drain = time.perf_counter()
            for t in loops:
                t.join()
            drains.append(round(time.perf_counter() - t_drain, 1))
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    u, lo = summary_ms(unloaded), summary_ms(loaded)
    statuses: dict[str, int] = {}
    for s, _, _ in flood:
        statuses[str(s)] = statuses.get(str(s), 0) + 1
    return {
        "unloaded": u,
        "flood": lo,
        "p95_ratio": round(lo["p95_ms"] / u["p95_ms"], 2),
        "p50_ratio": round(lo["p50_ms"] / u["p50_ms"], 2),
        "victim_errors": errors,
        "rounds": rounds,
        "flood_statuses": statuses,
        "flood_request_s": sorted(d for s, d, _ in flood if s == 200),
        "flood_drain_s": drains,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "inference_fairness")
    ap.add_argument("--requests", type=int, default=12, help="victim requests per phase")
    ap.add_argument("--flooders", type=int, default=4, help="concurrent flood loops (one token, one org)")
    ap.add_argument("--arms", default="fair,hold")
    ap.add_argument("--rounds", type=int, default=2, help="alternating quiet / flood blocks per arm")
    args = ap.parse_args(argv)

    from app.inference.engine import Engine, EngineConfig
    from app.kit.runtime.localmodel import local_model_dir

    path = os.environ.get("MEMSCALE_INFERENCE_MODEL") or local_model_dir(os.environ.get("MEMSCALE_DATA_DIR", ".memscale"))
    engine = Engine.load(EngineConfig(model_path=str(path), device="cpu", threads=1))
    load_before = load_average()
    arms = {arm: run_arm(engine, arm, args.requests, args.flooders, args.rounds) for arm in args.arms.split(",")}
    result = {
        "bench": "inference_fairness",
        "model": engine.model_id,
        "threads": 1,
        "victim": {"prompt_tokens": int(engine.system_ids.numel() + engine.query_ids(VICTIM).numel()), "max_tokens": 16},
        "flood": {
            "prompt_tokens": int(engine.system_ids.numel() + engine.query_ids(FLOOD).numel()),
            "max_tokens": 48,
            "loops": args.flooders,
            "one_token": True,
        },
        "requests_per_phase": args.requests,
        "rounds": args.rounds,
        "arms": arms,
        "target_p95_ratio": 3.0,
        "load_average": {"before": load_before, "after": load_average()},
    }
    lines = [
        "| arm | unloaded p50 / p95 ms | under flood p50 / p95 ms | p95 ratio (target <= 3) | flood statuses |",
        "|---|---|---|---|---|",
    ]
    for arm, r in arms.items():
        lines.append(
            f"| {arm} | {r['unloaded']['p50_ms']:.0f} / {r['unloaded']['p95_ms']:.0f} | "
            f"{r['flood']['p50_ms']:.0f} / {r['flood']['p95_ms']:.0f} | {r['p95_ratio']} | "
            f"{r['flood_statuses']} |"
        )
    return save(args.out, result, "\n".join(lines))


if __name__ == "__main__":
    main()
    os._exit(0)  # uvicorn's threads may linger
