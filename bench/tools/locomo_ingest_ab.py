"""Ingest rate over HTTP, this checkout against an earlier commit: LoCoMo's 2,760 turns (five
conversations, one private user each) stored through `POST /v1/episodes/batch` in batches of 250,
each arm its own API process on a fresh database its own code migrated, the conversations
alternating between the arms so both see the same load. Issue 13's bound: ingest no more than
20% slower than before (any extra embedding per turn counts).

    .venv/bin/python -m bench.tools.locomo_ingest_ab --against REV [--rounds 2]

Prints seconds and turns/s per arm and round, and the ratio new/old. Results:
bench/results/locomo_ingest_ab.json (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

BATCH = 250


def main(argv: list[str] | None = None) -> dict:
    import httpx

    from bench.common import ROOT, ApiProcess, fresh_database, load_average, worktree, write_result
    from bench.quality.locomo.data import load
    from bench.quality.locomo.run import turn_items
    from bench.tools.locomo_latency_ab import locomo_keys

    ap = argparse.ArgumentParser(
        prog="python -m bench.tools.locomo_ingest_ab", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--against", required=True, help="an earlier commit to measure beside this one")
    ap.add_argument("--rounds", type=int, default=2, help="fresh databases and a full ingest per round")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    convs = load()
    secs: dict = {"new": [], "old": []}
    loads = [load_average()]
    with worktree(a.against) as old_tree:
        for rnd in range(a.rounds):
            dbs = {
                "new": fresh_database("memscale_bench_ingest_new"),
                "old": fresh_database("memscale_bench_ingest_old", migrate=False),
            }  # its own process migrates it
            procs = {}
            try:
                for n, cwd in (("new", ROOT), ("old", old_tree)):
                    procs[n] = ApiProcess(
                        dbs[n], cwd=cwd, env={"MEMSCALE_RATE_LIMIT_PER_MINUTE": "0", "MEMSCALE_INGEST_ITEMS_PER_MINUTE": "0"}
                    )
                for p in procs.values():
                    p.wait_ready()
                keys = {n: locomo_keys(dbs[n], convs, create=True) for n in procs}
                http = {n: httpx.Client(base_url=p.base, timeout=600) for n, p in procs.items()}
                for n in procs:  # warm-up: the embedder's first call loads it
                    http[n].post(
                        "/v1/search",
                        json={"query": "warm up"},
                        headers={"Authorization": f"Bearer {keys[n][convs[0].sample_id]}"},
                    )
                took = {"new": 0.0, "old": 0.0}
                for i, c in enumerate(convs):
                    items = turn_items(c)
                    for n in ("new", "old") if (i + rnd) % 2 == 0 else ("old", "new"):
                        h = {"Authorization": f"Bearer {keys[n][c.sample_id]}"}
                        t = time.perf_counter()
                        for j in range(0, len(items), BATCH):
                            r = http[n].post("/v1/episodes/batch", json={"items": items[j : j + BATCH]}, headers=h)
                            if r.status_code != 201:
                                raise RuntimeError(f"{n}: {r.status_code} {r.text[:300]}")
                        took[n] += time.perf_counter() - t
                for n, v in took.items():
                    secs[n].append(round(v, 2))
                turns = sum(len(c.turns) for c in convs)
                print(
                    f"round {rnd}: new {took['new']:.1f} s ({turns / took['new']:.1f} turns/s), old {took['old']:.1f} s "
                    f"({turns / took['old']:.1f} turns/s), new/old time {took['new'] / took['old']:.3f}",
                    flush=True,
                )
                loads.append(load_average())
            finally:
                for p in procs.values():
                    p.stop()
    turns = sum(len(c.turns) for c in convs)
    out = {
        "against": a.against,
        "turns": turns,
        "seconds": secs,
        "load": loads,
        "turns_per_s": {n: [round(turns / s, 1) for s in v] for n, v in secs.items()},
        "time_ratio_new_over_old": round(sum(secs["new"]) / sum(secs["old"]), 3),
    }
    print(json.dumps(out))
    write_result("locomo_ingest_ab", out, a.out)
    return out


if __name__ == "__main__":
    main()
