"""Throughput of `memscale serve --workers N`: 1 vs 2 API processes on this machine, side by side
(phases interleaved: 1, 1+pg limits, 2, then again), the same closed-loop load each time.

    .venv/bin/python -m bench.speed.load.workers [--seconds 20] [--clients 8] [--rounds 2]

Load: `--clients` threads, each sending one request after the other for `--seconds`: 80 % hybrid
searches (a query embedded by the API process: CPU-bound, the GIL's work) and 20 % GETs of one
episode (database-bound). 2,000 episodes seeded first. Rate limits stay on (a budget no client
reaches) so the per-request cost of the limiter is in the figures: `1` keeps the buckets in
memory, `1+pg` and `2` in PostgreSQL (what --workers > 1 picks).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time

import httpx

from bench.command import parser, save
from bench.common import free_port, fresh_database, pct


def seed(settings, n: int) -> tuple[str, list[str]]:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from app.kit.database.pg import admin_url
    from app.orgs import service as orgs
    from bench.speed.service.data import sentence

    eng = create_engine(admin_url(settings))
    with Session(eng, info={"audit_key": settings.audit_secret()}) as db:
        org = orgs.create_org(db, "workers")
        user = orgs.create_user(db, org, "alice")
        key = orgs.create_key(db, user)
        db.commit()
    eng.dispose()
    proc = Server(settings, 1, {})
    try:
        rng = random.Random(1)
        ids: list[str] = []
        with httpx.Client(base_url=proc.base, headers={"Authorization": f"Bearer {key}"}, timeout=300) as c:
            for start in range(0, n, 250):
                items = [{"kind": "note", "content": sentence(rng), "visibility": "org"} for _ in range(min(250, n - start))]
                r = c.post("/v1/episodes/batch", json={"items": items})
                r.raise_for_status()
                ids += r.json()["ids"]
    finally:
        proc.stop()
    return key, ids


class Server:
    def __init__(self, settings, workers: int, env: dict):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        full = {
            **os.environ,
            "MEMSCALE_DATABASE_URL": settings.database_url,
            "MEMSCALE_DATA_DIR": str(settings.data_dir),
            "MEMSCALE_LOG_LEVEL": "WARNING",
            "MEMSCALE_RATE_LIMIT_PER_MINUTE": "10000000",
            "MEMSCALE_INGEST_ITEMS_PER_MINUTE": "10000000",
            **env,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(workers)],
            env=full,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.time() + 180
        ready = 0
        while ready < 3 * workers:  # several answers, so that every worker has loaded its model
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"serve --workers {workers} did not come up")
            try:
                if httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200:
                    ready += 1
            except httpx.TransportError:
                time.sleep(0.3)

    def stop(self) -> None:
        import signal

        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def load(base: str, key: str, ids: list[str], clients: int, seconds: float) -> dict:
    from bench.speed.service.data import query

    lat: dict[str, list[float]] = {"search": [], "get": []}
    errors: list[int] = []
    lock = threading.Lock()
    # warm-up: every worker embeds once before the clock starts
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        for _ in range(4):
            c.post("/v1/search", json={"query": "warm up the model", "k": 10})
    stop_at = time.time() + seconds

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
            while time.time() < stop_at:
                t0 = time.perf_counter()
                if rng.random() < 0.8:
                    kind, r = "search", c.post("/v1/search", json={"query": query(rng), "k": 10})
                else:
                    kind, r = "get", c.get(f"/v1/episodes/{rng.choice(ids)}")
                dt = time.perf_counter() - t0
                with lock:
                    (lat[kind].append(dt) if r.status_code == 200 else errors.append(r.status_code))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    done = len(lat["search"]) + len(lat["get"])
    return {
        "requests": done,
        "rps": round(done / wall, 1),
        "errors": len(errors),
        **{f"{k}_p50_ms": round(pct([x * 1000 for x in v], 50), 1) for k, v in lat.items()},
        **{f"{k}_p95_ms": round(pct([x * 1000 for x in v], 95), 1) for k, v in lat.items()},
    }


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "workers")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--episodes", type=int, default=2000)
    args = ap.parse_args(argv)
    settings = fresh_database("memscale_bench_workers")
    key, ids = seed(settings, args.episodes)
    phases = [
        ("1", 1, {"MEMSCALE_RATE_LIMIT_BACKEND": "memory"}),
        ("1+pg", 1, {"MEMSCALE_RATE_LIMIT_BACKEND": "postgres"}),
        ("2", 2, {}),
    ]
    runs = []
    for rnd in range(args.rounds):
        for label, workers, env in phases:
            srv = Server(settings, workers, env)
            try:
                res = load(srv.base, key, ids, args.clients, args.seconds)
            finally:
                srv.stop()
            runs.append({"round": rnd, "processes": label, **res})
            print(runs[-1], flush=True)
    summary = {}
    for label, _, _ in phases:
        rs = [r for r in runs if r["processes"] == label]
        summary[label] = {"rps_mean": round(sum(r["rps"] for r in rs) / len(rs), 1), "errors": sum(r["errors"] for r in rs)}
    summary["ratio_2_vs_1"] = round(summary["2"]["rps_mean"] / summary["1"]["rps_mean"], 2)
    out = {
        "cpus": os.cpu_count(),
        "clients": args.clients,
        "seconds": args.seconds,
        "episodes": len(ids),
        "runs": runs,
        "summary": summary,
    }
    print(summary)
    return save(args.out, out)


if __name__ == "__main__":
    main()
