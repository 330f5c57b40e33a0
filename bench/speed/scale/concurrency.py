"""Throughput under concurrent load with and without parallel query plans: migration
0020 made the RLS policy functions PARALLEL SAFE, so a large org's search may use parallel
workers; on a 2-core machine a plan that takes both cores for one request could cost throughput
when several requests run at once. Two API processes over one database built by bench.speed.scale (or
bench.speed.service): "parallel" as deployed, "serial" with `max_parallel_workers_per_gather = 0` for
its connections (PGOPTIONS); for each client count, rounds of `--seconds` of closed-loop load per
arm, the arms alternating, every client its own connection. Hybrid search over all types by the
org's reader u0.

    .venv/bin/python -m bench.speed.scale.concurrency [--db memscale_bench_scale_hash] [--org scale-0000]
        [--clients 1,4] [--seconds 20] [--rounds 2]

Prints and writes (bench/results/scale_concurrency.json or `--out`) per arm and client count:
requests per second, p50/p95 ms, and whether both arms handed out the same ids for the queries.
"""

from __future__ import annotations

import os
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ARMS = {"parallel": {}, "serial": {"PGOPTIONS": "-c max_parallel_workers_per_gather=0"}}


def _load(base: str, key: str, queries: list[str], clients: int, seconds: float) -> tuple[list[float], int]:
    """`clients` threads, each asking the next query as soon as the last one answered, for
    `seconds`: (latencies in ms, failed requests)."""
    import httpx

    lat: list[float] = []
    failed = [0]
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def client(i: int) -> None:
        with httpx.Client(base_url=base, timeout=120) as http:
            n = i
            while time.perf_counter() < stop:
                t = time.perf_counter()
                r = http.post(
                    "/v1/search", json={"query": queries[n % len(queries)], "k": 10}, headers={"Authorization": f"Bearer {key}"}
                )
                ms = (time.perf_counter() - t) * 1000
                with lock:
                    if r.status_code == 200:
                        lat.append(ms)
                    else:
                        failed[0] += 1
                n += clients

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat, failed[0]


def main(argv: list[str] | None = None) -> dict:
    import httpx
    from sqlalchemy import create_engine

    from app.kit.database.pg import admin_url
    from bench.command import parser, save
    from bench.common import ApiProcess, arm_row, database_settings, load_average
    from bench.speed.scale import measure

    ap = parser(__doc__, "scale_concurrency")
    ap.add_argument("--db", default="memscale_bench_scale_hash")
    ap.add_argument("--org", default="scale-0000")
    ap.add_argument("--clients", default="1,4")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--queries", type=int, default=60)
    a = ap.parse_args(argv)

    s = database_settings(a.db)
    admin = create_engine(admin_url(s))
    _, key = measure.reader(admin, s, a.org)
    admin.dispose()
    queries = measure.queries(a.queries)
    procs = {n: ApiProcess(s, env={"MEMSCALE_RATE_LIMIT_PER_MINUTE": "0", **env}) for n, env in ARMS.items()}
    try:
        for p in procs.values():
            p.wait_ready()
        same = 0
        for q in queries[:20]:  # warm-up, and the arms must agree on what they hand out
            got = []
            for p in procs.values():
                r = httpx.post(
                    f"{p.base}/v1/search", json={"query": q, "k": 10}, timeout=120, headers={"Authorization": f"Bearer {key}"}
                )
                r.raise_for_status()
                got.append([x["id"] for x in r.json()["results"]])
            same += got[0] == got[1]
        out: dict = {
            "db": a.db,
            "org": a.org,
            "seconds": a.seconds,
            "rounds": a.rounds,
            "same_results": f"{same}/20",
            "load": [load_average()],
            "clients": {},
        }
        for c in [int(x) for x in a.clients.split(",")]:
            lat = {n: [] for n in procs}
            secs = {n: 0.0 for n in procs}
            failed = {n: 0 for n in procs}
            for rnd in range(a.rounds):
                for n in list(procs) if rnd % 2 == 0 else list(reversed(procs)):
                    t0 = time.perf_counter()
                    got, bad = _load(procs[n].base, key, queries, c, a.seconds)
                    secs[n] += time.perf_counter() - t0
                    lat[n] += got
                    failed[n] += bad
            row = arm_row(lat)
            for n in procs:
                row[n].update(requests_per_s=round(len(lat[n]) / secs[n], 2), failed=failed[n])
            out["clients"][c] = row
            out["load"].append(load_average())
            print(
                f"clients {c}: "
                + "; ".join(f"{n} {v['requests_per_s']} req/s p50/p95 {v['p50_ms']}/{v['p95_ms']} ms" for n, v in row.items()),
                flush=True,
            )
        print("same results", out["same_results"], "load", out["load"])
        return save(a.out, out)
    finally:
        for p in procs.values():
            p.stop()


if __name__ == "__main__":
    main()
