"""bench/speed/load: N concurrent clients mixing writes, searches and /v1/context calls.

    .venv/bin/python -m bench.speed.load [--clients 50] [--seconds 60] [--pool-size N]

Loopback only, bounded (a hard deadline stops everything; ≤ 5 minutes with the defaults):

1. a fresh database `memscale_bench_load` in the embedded PostgreSQL (bench.common.fresh_database);
2. the API as its own process (`python -m app serve` on 127.0.0.1, so the load generator does not
   share its GIL), with the default Settings — `--pool-size` sets Settings.db_pool_size through
   its env var MEMSCALE_DB_POOL_SIZE, nothing else changes;
3. several orgs and users (keys through the admin service), each org seeded with episodes and
   memories so that searches and context calls find something;
4. `--clients` asyncio clients (httpx) for `--warmup` + `--seconds`, each as one user, looping over
   a weighted mix: POST /v1/episodes (write), POST /v1/episodes/batch of 5 (write_batch),
   POST /v1/search (search), POST /v1/context (context), GET /v1/episodes/{id} of one it wrote (read);
5. meanwhile PostgreSQL is sampled (pg_stat_activity) for the API role's connections, and the
   API's log is scanned afterwards for pool timeouts (`QueuePool limit ... timed out`).

Reports error rate, p50/p95/p99 per operation and overall, throughput, and pool figures, to
stdout and bench/results/load.json.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from bench.command import parser, save
from bench.common import ApiProcess, fresh_database, summary_ms
from bench.speed.service.data import query, sentence

DB_NAME = "memscale_bench_load"
MIX = {"write": 30, "write_batch": 5, "search": 35, "context": 20, "read": 10}


def _tenants(settings, n_orgs: int, users_per_org: int) -> list[dict]:
    from app.orgs import service as orgs

    eng = create_engine(settings.database_url)
    out = []
    with Session(eng, expire_on_commit=False) as db:
        for o in range(n_orgs):
            org = orgs.create_org(db, f"load-org-{o}")
            for u in range(users_per_org):
                user = orgs.create_user(
                    db, org, f"user-{u}", roles=["member"], groups=[f"team-{u % 2}"], clearances=["internal"] if u % 2 else []
                )
                out.append({"org": o, "user": u, "key": orgs.create_key(db, user), "group": f"team-{u % 2}"})
        db.commit()
    eng.dispose()
    return out


def _access(rng: random.Random, tenant: dict) -> dict:
    r = rng.random()
    if r < 0.5:
        return {"visibility": "org"}
    if r < 0.75:
        return {"visibility": "group", "groups": [tenant["group"]]}
    return {"visibility": "private"}


def _seed(base: str, tenants: list[dict], per_user: int, rng: random.Random) -> int:
    n = 0
    with httpx.Client(base_url=base, timeout=300) as c:
        for t in tenants:
            h = {"Authorization": f"Bearer {t['key']}"}
            items = [{"kind": "note", "content": sentence(rng), **_access(rng, t)} for _ in range(per_user)]
            r = c.post("/v1/episodes/batch", json={"items": items}, headers=h)
            r.raise_for_status()
            n += len(items)
            for _ in range(1):
                r = c.post("/v1/memories", json={"kind": "fact", "text": sentence(rng), **_access(rng, t)}, headers=h)
                r.raise_for_status()
                n += 1
    return n


class PoolSampler(threading.Thread):
    """Samples the API role's backends in pg_stat_activity every `every` seconds."""

    def __init__(self, admin_url: str, every: float = 0.1):
        super().__init__(daemon=True)
        self.engine = create_engine(admin_url, pool_size=1, max_overflow=0)
        self.every, self.samples = every, []
        self._halt = threading.Event()

    def run(self) -> None:
        q = text(
            "SELECT count(*), count(*) FILTER (WHERE state <> 'idle'), count(*) FILTER (WHERE state = 'active') "
            "FROM pg_stat_activity WHERE datname = current_database() AND usename = 'memscale_app'"
        )
        with self.engine.connect() as c:
            while not self._halt.is_set():
                total, busy, active = c.execute(q).one()
                c.commit()
                self.samples.append((total, busy, active))
                time.sleep(self.every)

    def stop(self) -> dict:
        self._halt.set()
        self.join(timeout=10)
        self.engine.dispose()
        totals = [s[0] for s in self.samples] or [0]
        busy = [s[1] for s in self.samples] or [0]
        active = [s[2] for s in self.samples] or [0]
        # busy = checked out by a request (a query running, or idle in transaction while the request
        # does Python work such as embedding); active = a query running in PostgreSQL right now.
        return {
            "samples": len(self.samples),
            "max_connections": max(totals),
            "max_busy": max(busy),
            "mean_busy": round(sum(busy) / len(busy), 2),
            "mean_active": round(sum(active) / len(active), 2),
        }


async def _client(
    i: int,
    base: str,
    tenant: dict,
    http: httpx.AsyncClient,
    rng: random.Random,
    t_measure: float,
    t_end: float,
    rec: list,
    written: list,
) -> None:
    h = {"Authorization": f"Bearer {tenant['key']}"}
    ops, weights = zip(*MIX.items())
    while True:
        now = time.perf_counter()
        if now >= t_end:
            return
        op = rng.choices(ops, weights)[0]
        if op == "read" and not written:
            op = "write"
        try:
            if op == "write":
                req = http.post(
                    "/v1/episodes", headers=h, json={"kind": "note", "content": sentence(rng), **_access(rng, tenant)}
                )
            elif op == "write_batch":
                req = http.post(
                    "/v1/episodes/batch",
                    headers=h,
                    json={"items": [{"kind": "note", "content": sentence(rng), **_access(rng, tenant)} for _ in range(5)]},
                )
            elif op == "search":
                req = http.post("/v1/search", headers=h, json={"query": query(rng), "k": 10})
            elif op == "context":
                req = http.post("/v1/context", headers=h, json={"query": query(rng), "budget_tokens": 1000})
            else:
                req = http.get(f"/v1/episodes/{rng.choice(written)}", headers=h)
            t0 = time.perf_counter()
            r = await req
            dt = time.perf_counter() - t0
            status, code = r.status_code, None
            if status >= 400:
                try:
                    code = r.json()["error"]["code"]
                except Exception:
                    code = "unparseable_error_body"
            elif op == "write":
                written.append(r.json()["id"])
        except httpx.TransportError as exc:
            dt, status, code = time.perf_counter() - t0, -1, type(exc).__name__
        if t0 >= t_measure:
            rec.append((op, status, dt, code, t0))


async def _run_load(
    base: str, tenants: list[dict], clients: int, warmup: float, seconds: float, seed: int
) -> tuple[list, float, float]:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    rec: list = []
    async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(60.0), limits=limits) as http:
        t_start = time.perf_counter()
        t_measure, t_end = t_start + warmup, t_start + warmup + seconds
        written: dict[int, list] = collections.defaultdict(list)
        tasks = [
            asyncio.create_task(
                _client(
                    i,
                    base,
                    tenants[i % len(tenants)],
                    http,
                    random.Random(seed + i),
                    t_measure,
                    t_end,
                    rec,
                    written[i % len(tenants)],
                )
            )
            for i in range(clients)
        ]
        # Hard bound: requests in flight at t_end get at most the HTTP timeout to finish.
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=warmup + seconds + 90)
        t_done = time.perf_counter()
    return rec, t_measure, max(t_done, t_end)


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "load")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60.0, help="measured duration")
    ap.add_argument("--warmup", type=float, default=5.0, help="unmeasured load before it")
    ap.add_argument("--orgs", type=int, default=5)
    ap.add_argument("--users-per-org", type=int, default=4)
    ap.add_argument("--seed-per-user", type=int, default=50, help="episodes seeded per user (and 1 memory)")
    ap.add_argument("--pool-size", type=int, default=None, help="Settings.db_pool_size (default: Settings' own)")
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args(argv)
    if args.seconds + args.warmup > 240:
        ap.error("warmup + seconds must stay under 240 s (the whole run is bounded to 5 minutes)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    rng = random.Random(args.seed)
    wall0 = time.time()

    def _overrun(signum, frame):
        raise TimeoutError("bench.speed.load ran past its 5-minute bound")

    signal.signal(signal.SIGALRM, _overrun)
    signal.alarm(290)  # whatever happens (slow seeding, a hung call): the finally blocks stop the API

    from app.config import Settings
    from app.kit.database.pg import admin_url

    settings = fresh_database(DB_NAME)
    pool_size = args.pool_size if args.pool_size is not None else Settings().db_pool_size
    log_path = Path(tempfile.mkdtemp(prefix="msload")) / "api.log"
    tenants = _tenants(settings, args.orgs, args.users_per_org)
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if args.pool_size is not None:
        env["MEMSCALE_DB_POOL_SIZE"] = str(args.pool_size)
    api = ApiProcess(settings, env=env, log_path=log_path)
    base = api.base
    sampler = None
    try:
        api.wait_ready(timeout=120)
        t0 = time.time()
        seeded = _seed(base, tenants, args.seed_per_user, rng)
        print(
            f"api on {base}; {len(tenants)} users in {args.orgs} orgs; seeded {seeded} items in "
            f"{time.time() - t0:.1f}s; {args.clients} clients for {args.warmup:.0f}+{args.seconds:.0f}s",
            flush=True,
        )
        load_before = round(os.getloadavg()[0], 2)  # other work on the machine skews every figure
        sampler = PoolSampler(admin_url(settings))
        sampler.start()
        rec, t_measure, t_done = asyncio.run(_run_load(base, tenants, args.clients, args.warmup, args.seconds, args.seed))
        pool = sampler.stop()
        sampler_samples, sampler = sampler.samples, None
    finally:
        try:
            if sampler is not None:
                sampler.stop()
        finally:
            api.stop()
    log = log_path.read_text(errors="replace")
    shutil.rmtree(log_path.parent, ignore_errors=True)
    pool_timeouts = log.count("QueuePool limit")
    server_errors_logged = log.count('"level": "ERROR"')

    by_op: dict[str, list] = collections.defaultdict(list)
    for r in rec:
        by_op[r[0]].append(r)
    measured_s = t_done - t_measure
    ops = {}
    for op, rows in sorted(by_op.items()):
        ok = [r for r in rows if 200 <= r[1] < 300]
        errors = collections.Counter(f"{r[1]} {r[3]}" for r in rows if not 200 <= r[1] < 300)
        ops[op] = {
            **summary_ms([r[2] for r in rows]),
            "ok": len(ok),
            "errors": dict(errors),
            "error_rate": round((len(rows) - len(ok)) / len(rows), 5) if rows else 0.0,
            "throughput_rps": round(len(rows) / measured_s, 2),
        }
    total = len(rec)
    failed = sum(1 for r in rec if not 200 <= r[1] < 300)
    five_xx = sum(1 for r in rec if r[1] >= 500 or r[1] == -1)
    result = {
        "config": {
            "clients": args.clients,
            "seconds": args.seconds,
            "warmup_s": args.warmup,
            "orgs": args.orgs,
            "users": len(tenants),
            "mix": MIX,
            "seeded_items": seeded,
            "db_pool_size": pool_size,
            "db_max_overflow": pool_size,
            "pool_timeout_s": 10,
            "server": "python -m app serve (1 uvicorn worker)",
            "cpus": os.cpu_count(),
            "loadavg_1m_before_after": [load_before, round(os.getloadavg()[0], 2)],
        },
        "overall": {
            **summary_ms([r[2] for r in rec]),
            "requests": total,
            "failed": failed,
            "error_rate": round(failed / total, 5) if total else None,
            "throughput_rps": round(total / measured_s, 2),
            "measured_s": round(measured_s, 1),
        },
        "operations": ops,
        "pool": {
            **pool,
            "capacity": 2 * pool_size,
            "share_of_samples_at_capacity": round(
                sum(1 for x in sampler_samples if x[1] >= 2 * pool_size) / max(1, len(sampler_samples)), 3
            ),
            "pool_timeouts_logged": pool_timeouts,
            "server_errors_logged": server_errors_logged,
            "responses_5xx_or_transport": five_xx,
            "exhausted": bool(pool_timeouts or five_xx),
        },
        "wall_s": round(time.time() - wall0, 1),
    }
    save(args.out, result)
    _drop_database(settings)
    signal.alarm(0)

    print(f"\n{'operation':12s} {'n':>6s} {'p50 ms':>8s} {'p95 ms':>8s} {'p99 ms':>8s} {'rps':>7s} {'errors':>7s}")
    for op, s in ops.items():
        print(
            f"{op:12s} {s['n']:6d} {s['p50_ms']:8.1f} {s['p95_ms']:8.1f} {s['p99_ms']:8.1f} "
            f"{s['throughput_rps']:7.1f} {s['n'] - s['ok']:7d}"
        )
    o = result["overall"]
    print(
        f"{'overall':12s} {o['n']:6d} {o['p50_ms']:8.1f} {o['p95_ms']:8.1f} {o['p99_ms']:8.1f} "
        f"{o['throughput_rps']:7.1f} {o['failed']:7d}"
    )
    p = result["pool"]
    print(
        f"error rate {o['error_rate']:.4%}; pool {pool_size}+{pool_size} overflow: max {p['max_connections']} "
        f"connections, {p['max_busy']} checked out at once (mean {p['mean_busy']}, {p['mean_active']} running a "
        f"query; at capacity in {p['share_of_samples_at_capacity']:.0%} of samples); {pool_timeouts} pool timeouts, "
        f"{five_xx} 5xx/transport errors -> exhausted: {p['exhausted']}"
    )
    for op, s in ops.items():
        if s["errors"]:
            print(f"  {op} errors: {json.dumps(s['errors'])}")
    print(f"{result['wall_s']}s wall")
    return result


def _drop_database(settings) -> None:
    from sqlalchemy.engine import make_url

    server = make_url(settings.database_url).set(database="postgres")
    eng = create_engine(server, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(text(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)"))
    eng.dispose()


if __name__ == "__main__":
    main()
