"""Knowledge navigation and instructed search latency.

    .venv/bin/python -m bench.speed.knowledge_tree [--tables 500] [--columns 20] [--calls 200] [--reuse]

A SQLite source of `tables` x `columns` (a foreign key from every table to the previous one) is
bootstrapped by the real job with enrichment (org-visible). The embedder is a word-hashing one
unless `--real-embedder`: the tree endpoints never read embeddings, and on a loaded 2-core
machine MiniLM took ~2 s per table text (1,000 texts), which would only slow the set-up; the
search comparison then measures what an instruction adds, not the query's embedding. Then, over HTTP
(auth, casbin, RLS, JSON included), as a plain member: GET /v1/knowledge/tree at the top, the catalog,
the schema (all tables) and GET /v1/knowledge/nodes/{id} of a table, `calls` times each,
interleaved, both in-process through the TestClient (`navigation_ms`) and over a loopback socket
to uvicorn (`navigation_http_ms`: what a client sees). Instructed search: POST /v1/search with and
without an `instruction`, interleaved in one process, and the interpreter alone. Results:
bench/results/knowledge_tree.json, with the load average (1/5/15 min) before and after the timed
calls: the machine is shared.

Set-up is the bootstrap (~150 s on a quiet 2-core machine, ~16 min at load 7-9). `--reuse`
keeps it: the database `memscale_bench_tree` survives a run, and a later run with `--reuse`
measures the org `tree-<tables>x<columns>` an earlier run bootstrapped (found by name, with a
succeeded bootstrap job; new keys for its users) instead of dropping and rebuilding it. Only
valid while the bootstrap/enrich code is unchanged (what the nodes hold is what is read); the
reads themselves are the current code's. Without `--reuse` every run builds afresh.
"""

from __future__ import annotations

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
    return {"calls": len(ms), "p50": round(q[49], 2), "p95": round(q[94], 2), "p99": round(q[98], 2), "max": round(max(ms), 2)}


class HashingEmbedder:
    """Bag of hashed words, L2-normalised, 384 dimensions: deterministic and ~free."""

    dim = 384

    def embed(self, texts: list[str]):
        import hashlib
        import re

        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                out[i, int(hashlib.blake2b(w.encode(), digest_size=4).hexdigest(), 16) % self.dim] += 1.0
            n = float(np.linalg.norm(out[i]))
            out[i] = out[i] / n if n else out[i]
            if not n:
                out[i, 0] = 1.0
        return out


def _service_times(h, org, table_id: str, calls: int) -> dict:
    """The same reads without HTTP, auth and JSON: navigation.tree/node in one RLS-bound session."""
    import uuid

    from sqlalchemy import text

    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal
    from app.knowledge import navigation

    with h.admin.connect() as c:
        uid = c.execute(text("SELECT id FROM users WHERE org_id = :o AND name = 'analyst'"), {"o": org.id}).scalar()
    p = Principal(org_id=org.id, user_id=uid, name="analyst", roles=("member",), groups=(), clearances=())
    fns = {
        "tree_top": lambda db: navigation.tree(db, p, None),
        "tree_schema_all_tables": lambda db: navigation.tree(db, p, "warehouse/main"),
        "tree_schema_page_100": lambda db: navigation.tree(db, p, "warehouse/main", limit=100),
        "node_table": lambda db: navigation.node(db, p, uuid.UUID(table_id)),
    }
    out: dict[str, list[float]] = {k: [] for k in fns}
    with h.app.state.sessions() as db:
        bind_principal(db, p)
        for _ in range(calls):
            for name, fn in fns.items():
                t = time.perf_counter()
                fn(db)
                out[name].append((time.perf_counter() - t) * 1000)
        db.rollback()
    return {k: _stats(v) for k, v in out.items()}


def _reused_org(h, name: str):
    """The org an earlier run bootstrapped (by name, with a succeeded bootstrap), with new keys."""
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    from app.client import MemscaleClient
    from app.orgs import service as orgs
    from app.orgs.models import User
    from bench.quality.memory_scaling.run import Org

    with Session(h.admin, expire_on_commit=False) as db:
        org_id = db.execute(
            text(
                "SELECT o.id FROM orgs o JOIN jobs j ON j.org_id = o.id AND j.kind = 'bootstrap' "
                "AND j.status = 'succeeded' WHERE o.name = :n LIMIT 1"
            ),
            {"n": name},
        ).scalar()
        if org_id is None:
            return None
        users = db.query(User).filter(User.org_id == org_id).all()
        keys = {u.name: orgs.create_key(db, u) for u in users}
        db.commit()
    return Org(name, org_id, {u: MemscaleClient(base_url="", api_key=k, transport=h.http) for u, k in keys.items()})


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
    from app.client import MemscaleClient
    from app.config import Settings
    from app.search.instruction import interpret
    from bench.command import parser, save
    from bench.common import ApiProcess, existing_database, serve_in_thread
    from bench.quality.instructions.data import load
    from bench.quality.memory_scaling.run import Harness

    ap = parser(__doc__, "knowledge_tree")
    ap.add_argument("--tables", type=int, default=500)
    ap.add_argument("--columns", type=int, default=20)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--real-embedder", action="store_true", help="MiniLM for the bootstrap and search (slow set-up)")
    ap.add_argument("--reuse", action="store_true", help="measure the org an earlier run bootstrapped, if any")
    a = ap.parse_args(argv)
    db_name, org_name = "memscale_bench_tree", f"tree-{a.tables}x{a.columns}"
    h = Harness(
        db_name,
        model=Settings().llm_model,
        budget=1000,
        embedder=None if a.real_embedder else HashingEmbedder(),
        settings=existing_database(db_name) if a.reuse else None,
    )
    result: dict = {
        "benchmark": "knowledge_tree",
        "tables": a.tables,
        "columns": a.columns,
        "embedder": "all-MiniLM-L6-v2" if a.real_embedder else "word hashing (384 d)",
    }
    api = None
    try:
        org = _reused_org(h, org_name) if a.reuse else None
        result["reused_bootstrap"] = org is not None
        if org is None:
            src = Path(tempfile.mkdtemp(prefix="memscale_tree_")) / "warehouse.sqlite"
            make_source(src, a.tables, a.columns)
            org = h.new_org(org_name)
            t0 = time.perf_counter()
            stats = h.job(org, "bootstrap", {"schema_url": f"sqlite:///{src}", "visibility": "org"})
            result["bootstrap_s"] = round(time.perf_counter() - t0, 1)
            result["bootstrap_stats"] = {k: v for k, v in stats.items() if isinstance(v, int)}
        c = org.analyst
        table_id = c.knowledge_tree("warehouse/main")["children"][a.tables // 2]["id"]
        # The same calls in-process (TestClient), over a real loopback socket to uvicorn in a thread
        # of this process (the app's state as the TestClient's lifespan set it up; client and server
        # share one GIL), and to the API as its own process (`python -m app serve`, what a client
        # on another machine sees, less the network), interleaved.
        wire = MemscaleClient(base_url=serve_in_thread(h.app, lifespan="off"), api_key=c.api_key)
        api = ApiProcess(h.settings)
        api.wait_ready()
        apart = MemscaleClient(base_url=api.base, api_key=c.api_key)

        def calls_of(cl):
            return {
                "tree_top": lambda: cl.knowledge_tree(None),
                "tree_catalog": lambda: cl.knowledge_tree("warehouse"),
                "tree_schema_all_tables": lambda: cl.knowledge_tree("warehouse/main"),
                "tree_schema_page_100": lambda: cl.knowledge_tree("warehouse/main", limit=100),
                "node_table": lambda: cl.knowledge_node(table_id),
            }

        arms = {"navigation_ms": calls_of(c), "navigation_http_ms": calls_of(wire), "navigation_process_http_ms": calls_of(apart)}
        result["load_before"] = [round(x, 2) for x in os.getloadavg()]
        for calls in arms.values():  # warm
            for fn in calls.values():
                fn()
        times: dict = {arm: {k: [] for k in calls} for arm, calls in arms.items()}
        for _ in range(a.calls):
            for name in arms["navigation_ms"]:
                for arm, calls in arms.items():
                    t = time.perf_counter()
                    calls[name]()
                    times[arm][name].append((time.perf_counter() - t) * 1000)
        for arm in arms:
            result[arm] = {k: _stats(v) for k, v in times[arm].items()}
        wire.close()
        apart.close()
        result["navigation_service_ms"] = _service_times(h, org, table_id, a.calls)
        result["load_after_navigation"] = [round(x, 2) for x in os.getloadavg()]
        schema = c.knowledge_tree("warehouse/main")
        result["schema_children"] = len(schema["children"])
        result["schema_response_bytes"] = len(json.dumps(schema, separators=(",", ":")))
        query, instruction = "which column holds the amounts", "only schema hints from this year, org-wide, not drafts"
        plain, instructed = [], []
        for _ in range(max(20, a.calls // 4)):
            for body, out in (({}, plain), ({"instruction": instruction}, instructed)):
                t = time.perf_counter()
                c.search(query, k=10, **body)
                out.append((time.perf_counter() - t) * 1000)
        result["search_ms"] = {
            "without_instruction": _stats(plain),
            "with_instruction": _stats(instructed),
            "instruction": instruction,
        }
        pairs = load()
        alone = []
        for _ in range(5):
            for p in pairs:
                t = time.perf_counter()
                interpret(p.instruction)
                alone.append((time.perf_counter() - t) * 1000)
        result["interpreter_alone_ms"] = _stats(alone)
        result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        if api is not None:
            api.stop()
        h.close()
    print(json.dumps(result, indent=1))
    return save(a.out, result, indent=1)


if __name__ == "__main__":
    main()
