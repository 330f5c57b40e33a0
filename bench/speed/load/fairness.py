"""bench/speed/load/fairness: one tenant floods 1 MB batches while another tenant searches.

    .venv/bin/python -m bench.speed.load.fairness [--flood-s 45] [--flooders 3] [--batch 500]

Loopback only, bounded (each phase has a hard deadline). In one run, side by side, for the API
with fair embedding off (`MEMSCALE_EMBED_FAIRNESS=false`: one embedding call at a time, first come
first served, no item budget: the behaviour before) and on (the default):

1. a fresh database `memscale_bench_fair`, the API as its own process (`python -m app serve`);
2. org A with a victim user, seeded with 200 short episodes; org B with a flooding user;
3. unloaded: the victim searches (`POST /v1/search`, hybrid, k=10) back to back for `--quiet-s`;
4. flood: `--flooders` concurrent loops of the flooding key post batches of `--batch` episodes of
   ~2 KB each (~1 MB a request) for `--flood-s`, while the victim keeps searching.

Reports the victim's search p50/p95/max and errors unloaded and under flood, the p95 ratio, and
the flooder's status codes (201 / 429, and whether each 429 carried Retry-After), to stdout and
bench/results/fairness.json.

`--flood dates` floods with pathological time expressions instead, from one member
of org B: `--flooders` (default 4 here) loops of `POST /v1/search` and `/v1/context` whose query is
`("in 2023-02-30 " * 200)[:2000]` and whose instruction is its first 1,000 characters. Before the
unloaded phase, the time per request of that body (median of 10 searches and of 10 contexts, one
at a time, in the one API process) and of a plain query. `--against REV` runs the same, side by
side in one run, against an earlier commit's API (its own worktree, removed afterwards).
`--read-gate-ab` adds an arm of this checkout with the per-key read gate off
(`MEMSCALE_READS_PER_KEY=0`, app/kit/http/read_gate.py). Results: bench/results/fairness_dates.json.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from bench.command import parser, save
from bench.common import RESULTS, ApiProcess, fresh_database, pct, summary_ms, worktree
from bench.speed.service.data import query, sentence

DB_NAME = "memscale_bench_fair"
PATHOLOGICAL = ("in 2023-02-30 " * 200)[:2000]
DATES_BODY = {"query": PATHOLOGICAL, "instruction": PATHOLOGICAL[:1000], "k": 10}


def _keys(settings) -> tuple[str, str]:
    from app.orgs import service as orgs

    eng = create_engine(settings.database_url)
    with Session(eng, expire_on_commit=False) as db:
        a, b = orgs.create_org(db, f"victim-{time.time_ns()}"), orgs.create_org(db, f"flood-{time.time_ns()}")
        victim = orgs.create_key(db, orgs.create_user(db, a, "victim"))
        flooder = orgs.create_key(db, orgs.create_user(db, b, "flooder"))
        db.commit()
    eng.dispose()
    return victim, flooder


def _ready(api, settings) -> tuple[str, str, random.Random]:
    """Wait for the API, make the two keys, seed the victim's org with 200 short episodes."""
    api.wait_ready()
    victim, flooder = _keys(settings)
    rng = random.Random(7)
    with httpx.Client(base_url=api.base, timeout=300, headers={"Authorization": f"Bearer {victim}"}) as c:
        c.post(
            "/v1/episodes/batch", json={"items": [{"kind": "note", "content": sentence(rng)} for _ in range(200)]}
        ).raise_for_status()
    return victim, flooder, rng


def _search_loop(base: str, key: str, until: float, rng: random.Random, lat: list, errors: list) -> None:
    with httpx.Client(base_url=base, timeout=300, headers={"Authorization": f"Bearer {key}"}) as c:
        while time.perf_counter() < until:
            t0 = time.perf_counter()
            try:
                r = c.post("/v1/search", json={"query": query(rng), "k": 10})
                (lat if r.status_code == 200 else errors).append(
                    time.perf_counter() - t0 if r.status_code == 200 else r.status_code
                )
            except httpx.HTTPError as exc:
                errors.append(type(exc).__name__)


def _flood_loop(base: str, key: str, until: float, batch: int, rng: random.Random, codes: list) -> None:
    body_text = " ".join(sentence(rng) for _ in range(25))[:2000]
    with httpx.Client(base_url=base, timeout=600, headers={"Authorization": f"Bearer {key}"}) as c:
        while time.perf_counter() < until:
            items = [{"kind": "note", "content": f"{i} {body_text}"} for i in range(batch)]
            try:
                r = c.post("/v1/episodes/batch", json={"items": items})
                codes.append((r.status_code, "retry-after" in r.headers))
                if r.status_code == 429:
                    time.sleep(min(5.0, float(r.headers.get("retry-after", "1"))))
            except httpx.HTTPError as exc:
                codes.append((type(exc).__name__, False))


def _dates_loop(base: str, key: str, until: float, codes: list) -> None:
    """One member's loop of pathological search and context requests, back to back."""
    with httpx.Client(base_url=base, timeout=300, headers={"Authorization": f"Bearer {key}"}) as c:
        i = 0
        while time.perf_counter() < until:
            path = "/v1/search" if i % 2 == 0 else "/v1/context"
            body = DATES_BODY if path == "/v1/search" else {k: v for k, v in DATES_BODY.items() if k != "k"}
            i += 1
            try:
                r = c.post(path, json=body)
                codes.append((r.status_code, "retry-after" in r.headers))
                if r.status_code == 429:
                    time.sleep(min(5.0, float(r.headers.get("retry-after", "1"))))
            except httpx.HTTPError as exc:
                codes.append((type(exc).__name__, False))


def _per_request_ms(base: str, key: str, n: int = 10) -> dict:
    """Median ms of `n` requests one at a time: the pathological body on search and on context,
    and a plain search beside them."""
    out = {}
    with httpx.Client(base_url=base, timeout=300, headers={"Authorization": f"Bearer {key}"}) as c:
        for name, path, body in (
            ("search_pathological", "/v1/search", DATES_BODY),
            ("context_pathological", "/v1/context", {k: v for k, v in DATES_BODY.items() if k != "k"}),
            ("search_plain", "/v1/search", {"query": "the deploy failed in march", "k": 10}),
        ):
            c.post(path, json=body).raise_for_status()  # warm
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                c.post(path, json=body).raise_for_status()
                times.append(time.perf_counter() - t0)
            out[name] = {"median_ms": round(pct([t * 1000 for t in times], 50), 1), "max_ms": round(max(times) * 1000, 1)}
    return out


def run_dates(settings, *, quiet_s: float, flood_s: float, flooders: int, cwd=None, env=None) -> dict:
    """The dates flood against the API of `cwd` (None: this checkout), with `env` added to its
    environment (e.g. `MEMSCALE_READS_PER_KEY=0`: no per-key read gate)."""
    env = {"MEMSCALE_RATE_LIMIT_PER_MINUTE": "100000", **({"PYTHONPATH": str(cwd)} if cwd else {}), **(env or {})}
    api = ApiProcess(settings, env=env, cwd=cwd)
    try:
        victim, flooder, rng = _ready(api, settings)
        per_request = _per_request_ms(api.base, flooder)
        quiet, qerr = [], []
        _search_loop(api.base, victim, time.perf_counter() + quiet_s, rng, quiet, qerr)
        loaded, lerr, codes = [], [], []
        until = time.perf_counter() + flood_s
        threads = [threading.Thread(target=_dates_loop, args=(api.base, flooder, until, codes)) for _ in range(flooders)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        _search_loop(api.base, victim, until, rng, loaded, lerr)
        for t in threads:
            t.join(timeout=900)
        q, lo = summary_ms(quiet), summary_ms(loaded)
        return {
            "per_request": per_request,
            "unloaded": {**q, "max_ms": round(max(quiet, default=0) * 1000, 1), "errors": qerr},
            "flood": {**lo, "max_ms": round(max(loaded, default=0) * 1000, 1), "errors": lerr},
            "p95_ratio": round(lo["p95_ms"] / q["p95_ms"], 2) if q["p95_ms"] else None,
            "flooder": {
                "200": sum(1 for c, _ in codes if c == 200),
                "429": sum(1 for c, _ in codes if c == 429),
                "other": [c for c, _ in codes if c not in (200, 429)],
            },
        }
    finally:
        api.stop()


def main_dates(a) -> dict:
    out = {"args": vars(a), "runs": {}}
    with worktree(a.against) as old_tree:
        arms = (
            ((("old", old_tree, {}),) if old_tree else ())
            + ((("no_read_gate", None, {"MEMSCALE_READS_PER_KEY": "0"}),) if a.read_gate_ab else ())
            + (("new", None, {}),)
        )
        for arm, cwd, env in arms:
            settings = fresh_database(DB_NAME)
            r = run_dates(settings, quiet_s=a.quiet_s, flood_s=a.flood_s, flooders=a.flooders, cwd=cwd, env=env)
            out["runs"][arm] = r
            print(
                f"{arm}: per request {r['per_request']} | unloaded p50 {r['unloaded']['p50_ms']} p95 "
                f"{r['unloaded']['p95_ms']} ms | flood p50 {r['flood']['p50_ms']} p95 {r['flood']['p95_ms']} max "
                f"{r['flood']['max_ms']} ms (n={r['flood']['n']}, errors {len(r['flood']['errors'])}) | "
                f"p95 ratio {r['p95_ratio']} | flooder {r['flooder']}",
                flush=True,
            )
    return save(a.out or RESULTS / "fairness_dates.json", out)


def run_config(settings, *, fair: bool, quiet_s: float, flood_s: float, flooders: int, batch: int) -> dict:
    api = ApiProcess(
        settings, env={"MEMSCALE_EMBED_FAIRNESS": "true" if fair else "false", "MEMSCALE_RATE_LIMIT_PER_MINUTE": "100000"}
    )
    try:
        victim, flooder, rng = _ready(api, settings)
        quiet, qerr = [], []
        _search_loop(api.base, victim, time.perf_counter() + quiet_s, rng, quiet, qerr)
        loaded, lerr, codes = [], [], []
        until = time.perf_counter() + flood_s
        threads = [
            threading.Thread(target=_flood_loop, args=(api.base, flooder, until, batch, random.Random(i), codes))
            for i in range(flooders)
        ]
        for t in threads:
            t.start()
        time.sleep(1.0)  # let the batches reach the embedder
        _search_loop(api.base, victim, until, rng, loaded, lerr)
        for t in threads:
            t.join(timeout=900)
        q, lo = summary_ms(quiet), summary_ms(loaded)
        return {
            "fair": fair,
            "unloaded": {**q, "max_ms": round(max(quiet, default=0) * 1000, 1), "errors": qerr},
            "flood": {**lo, "max_ms": round(max(loaded, default=0) * 1000, 1), "errors": lerr},
            "p95_ratio": round(lo["p95_ms"] / q["p95_ms"], 2) if q["p95_ms"] else None,
            "flooder": {
                "201": sum(1 for c, _ in codes if c == 201),
                "429": sum(1 for c, _ in codes if c == 429),
                "429_with_retry_after": sum(1 for c, h in codes if c == 429 and h),
                "other": [c for c, _ in codes if c not in (201, 429)],
            },
        }
    finally:
        api.stop()


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, None)
    ap.add_argument("--quiet-s", type=float, default=15)
    ap.add_argument("--flood-s", type=float, default=45)
    ap.add_argument("--flooders", type=int, default=None, help="concurrent flood loops (batches 3, dates 4)")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--flood", choices=("batches", "dates"), default="batches")
    ap.add_argument("--against", default=None, help="dates: an earlier commit's API measured side by side")
    ap.add_argument(
        "--read-gate-ab",
        action="store_true",
        help="dates: this checkout also without its per-key read gate (MEMSCALE_READS_PER_KEY=0)",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the JSON result (default: bench/results/fairness.json, fairness_dates.json with --flood dates)",
    )
    a = ap.parse_args(argv)
    a.flooders = a.flooders or (4 if a.flood == "dates" else 3)
    if a.flood == "dates":
        return main_dates(a)
    settings = fresh_database(DB_NAME)
    out = {"args": vars(a), "runs": []}
    for fair in (False, True):
        r = run_config(settings, fair=fair, quiet_s=a.quiet_s, flood_s=a.flood_s, flooders=a.flooders, batch=a.batch)
        out["runs"].append(r)
        print(
            f"fair={fair}: unloaded p50 {r['unloaded']['p50_ms']} p95 {r['unloaded']['p95_ms']} ms | "
            f"flood p50 {r['flood']['p50_ms']} p95 {r['flood']['p95_ms']} max {r['flood']['max_ms']} ms "
            f"(n={r['flood']['n']}, errors {len(r['flood']['errors'])}) | p95 ratio {r['p95_ratio']} | "
            f"flooder {r['flooder']}",
            flush=True,
        )
    return save(a.out or RESULTS / "fairness.json", out)


if __name__ == "__main__":
    main()
