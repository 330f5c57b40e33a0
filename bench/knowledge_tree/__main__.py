"""Knowledge navigation and instructed search latency (issue 17).

    .venv/bin/python -m bench.knowledge_tree [--tables 500] [--columns 20] [--calls 200]

A SQLite source of `tables` x `columns` (a foreign key from every table to the previous one) is
bootstrapped by the real job with enrichment (org-visible). Then, over HTTP in-process (auth,
casbin, RLS, JSON included), as a plain member: GET /v1/knowledge/tree at the top, the catalog,
the schema (all tables) and GET /v1/knowledge/nodes/{id} of a table, `calls` times each,
interleaved. Instructed search: POST /v1/search with and without an `instruction`, interleaved
in one process, and the interpreter alone. Results: bench/results/knowledge_tree.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path
from statistics import quantiles

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _stats(ms: list[float]) -> dict:
    q = quantiles(ms, n=100)
    return {"calls": len(ms), "p50": round(q[49], 2), "p95": round(q[94], 2), "p99": round(q[98], 2),
            "max": round(max(ms), 2)}


def make_source(path: Path, tables: int, columns: int) -> None:
    types = ["INTEGER", "TEXT", "REAL", "TEXT", "INTEGER"]
    with sqlite3.connect(path) as db:
        for t in range(tables):
            cols = [f"c_{t:03d}_00 INTEGER PRIMARY KEY"]
            if t:
                cols.append(f"c_{t:03d}_01 INTEGER REFERENCES t_{t - 1:03d}(c_{t - 1:03d}_00)")
            cols += [f"c_{t:03d}_{c:02d} {types[c % len(types)]}" for c in range(len(cols), columns)]
            db.execute(f"CREATE TABLE t_{t:03d} ({', '.join(cols)})")
            for r in range(5):
                db.execute(f"INSERT INTO t_{t:03d} (c_{t:03d}_00) VALUES ({r + 1})")


def main(argv: list[str] | None = None) -> dict:
    from app.config import Settings
    from app.search.instruction import interpret
    from bench.common import RESULTS
    from bench.instructions.data import load
    from bench.scaling.run import Harness

    ap = argparse.ArgumentParser(prog="python -m bench.knowledge_tree", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", type=int, default=500)
    ap.add_argument("--columns", type=int, default=20)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="memscale_tree_"))
    src = tmp / "warehouse.sqlite"
    make_source(src, a.tables, a.columns)
    h = Harness("memscale_bench_tree", model=Settings().llm_model, budget=1000)
    result: dict = {"benchmark": "knowledge_tree", "tables": a.tables, "columns": a.columns}
    try:
        org = h.new_org("tree")
        t0 = time.perf_counter()
        stats = h.job(org, "bootstrap", {"schema_url": f"sqlite:///{src}", "visibility": "org"})
        result["bootstrap_s"] = round(time.perf_counter() - t0, 1)
        result["bootstrap_stats"] = {k: v for k, v in stats.items() if isinstance(v, int)}
        c = org.analyst
        table_id = c.knowledge_tree("warehouse/main")["children"][a.tables // 2]["id"]
        calls = {"tree_top": lambda: c.knowledge_tree(None), "tree_catalog": lambda: c.knowledge_tree("warehouse"),
                 "tree_schema_all_tables": lambda: c.knowledge_tree("warehouse/main"),
                 "node_table": lambda: c.knowledge_node(table_id)}
        for fn in calls.values():  # warm
            fn()
        times: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(a.calls):
            for name, fn in calls.items():
                t = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t) * 1000)
        result["navigation_ms"] = {k: _stats(v) for k, v in times.items()}
        result["schema_children"] = len(c.knowledge_tree("warehouse/main")["children"])
        query, instruction = "which column holds the amounts", "only schema hints from this year, org-wide, not drafts"
        plain, instructed = [], []
        for _ in range(max(20, a.calls // 4)):
            for body, out in (({}, plain), ({"instruction": instruction}, instructed)):
                t = time.perf_counter()
                c.search(query, k=10, **body)
                out.append((time.perf_counter() - t) * 1000)
        result["search_ms"] = {"without_instruction": _stats(plain), "with_instruction": _stats(instructed),
                               "instruction": instruction}
        pairs = load()
        alone = []
        for _ in range(5):
            for p in pairs:
                t = time.perf_counter()
                interpret(p.instruction)
                alone.append((time.perf_counter() - t) * 1000)
        result["interpreter_alone_ms"] = _stats(alone)
    finally:
        h.close()
    print(json.dumps(result, indent=1))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "knowledge_tree.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
