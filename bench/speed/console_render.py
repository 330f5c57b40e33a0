"""First-render server time of each console page at 100k items in the org: the API calls a page
makes before it first draws (app/ui/*.js), timed over loopback HTTP against one API server.

    .venv/bin/python -m bench.speed.console_render [--n 100000] [--rounds 20]

The rows (n memories, n episodes and n knowledge assets, owners round-robin over 20 users, 0.5%
visible to the whole org) are written with one INSERT ... SELECT each into a fresh database
`memscale_console_render` (no embeddings: no page's first render searches; search latency at this
size is bench.service's). The org keeps episodes 30 days, so the compliance page's retention rule
counts what its next run removes over all n episodes (a tenth of them older than the cutoff).
Episodes and assets are stored over time too: a tenth 90 days ago, the rest a day ago, so an
as-of 30 days back lists a tenth of the org.
Figures go to stdout and bench/results/console_render.json.
"""

from __future__ import annotations

import argparse
import time

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from bench.common import fresh_database, serve_in_thread, summary_ms, write_result

ROWS = {
    "memories": "INSERT INTO memories (id, root_id, org_id, owner_id, visibility, text, kind) "
    "SELECT g.id, g.id, :o, (:users)[1 + (g.i % 20)], CASE WHEN g.i % 200 = 0 THEN 'org' ELSE 'private' END, "
    "'memory number ' || g.i || ' about invoices, deploys and refunds', "
    "(ARRAY['fact','rule','preference','procedure'])[1 + (g.i % 4)] "
    "FROM (SELECT gen_random_uuid() AS id, i FROM generate_series(1, :n) i) g",
    "episodes": "INSERT INTO episodes (id, org_id, owner_id, visibility, kind, content, occurred_at, created_at) "
    "SELECT gen_random_uuid(), :o, (:users)[1 + (g.i % 20)], CASE WHEN g.i % 200 = 0 THEN 'org' ELSE 'private' END, "
    "'note', 'episode number ' || g.i || ' of a long-running agent', "
    "g.at, g.at FROM (SELECT i, now() - CASE WHEN i % 10 = 0 THEN interval '90 days' ELSE interval '1 day' END AS at "
    "FROM generate_series(1, :n) i) g",
    "knowledge_assets": "INSERT INTO knowledge_assets "
    "(id, org_id, owner_id, visibility, kind, source_uri, title, content_hash, created_at) "
    "SELECT g.id, :o, (:users)[1 + (g.i % 20)], CASE WHEN g.i % 200 = 0 THEN 'org' ELSE 'private' END, "
    "(ARRAY['document','table_schema','glossary'])[1 + (g.i % 3)], 'file:///wiki/' || g.i || '.md', "
    "'wiki page ' || g.i, md5(g.i::text), "
    "now() - CASE WHEN g.i % 10 = 0 THEN interval '90 days' ELSE interval '1 day' END "
    "FROM (SELECT gen_random_uuid() AS id, i FROM generate_series(1, :n) i) g",
}
RETENTION = """UPDATE orgs SET settings = '{"retention": {"episode": 30}}' WHERE id = :o"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    from app.kit.runtime.embedding import LocalEmbedder
    from app.main import create_app
    from app.orgs import service as orgs

    settings = fresh_database("memscale_console_render").model_copy(update={"log_level": "WARNING"})
    admin = create_engine(settings.database_url)
    with Session(admin, expire_on_commit=False) as db:
        org = orgs.create_org(db, "render")
        users = [orgs.create_user(db, org, f"u{i}", roles=["auditor"] if i == 0 else []) for i in range(20)]
        key = orgs.create_key(db, users[0])
        db.commit()
    t0 = time.perf_counter()
    with admin.begin() as c:
        for sql in ROWS.values():
            c.execute(text(sql), {"o": org.id, "users": [u.id for u in users], "n": args.n})
        c.execute(text(RETENTION), {"o": org.id})
    with admin.connect() as c:
        c.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE memories, episodes, knowledge_assets"))
        mid = c.execute(
            text("SELECT id FROM memories WHERE org_id = :o ORDER BY id OFFSET :k LIMIT 1"), {"o": org.id, "k": args.n // 2}
        ).scalar()
        mine = c.execute(
            text("SELECT id FROM memories WHERE org_id = :o AND owner_id = :u LIMIT 1"), {"o": org.id, "u": users[0].id}
        ).scalar()
        episode = c.execute(
            text("SELECT id FROM episodes WHERE org_id = :o AND owner_id = :u LIMIT 1"), {"o": org.id, "u": users[0].id}
        ).scalar()
        then = c.execute(text("SELECT now() - interval '30 days'")).scalar().isoformat()
    print(f"{3 * args.n} rows written in {time.perf_counter() - t0:.1f} s")

    base = serve_in_thread(create_app(settings, embedder=LocalEmbedder()))
    h = {"Authorization": f"Bearer {key}"}
    pages = {  # the calls each page makes before its first draw (app/ui/<page>.js render)
        "browse (memories, page 1)": [("GET", "/v1/memories", {"limit": 50})],
        "browse (memories, a page mid-org)": [("GET", "/v1/memories", {"limit": 50, "cursor": str(mid)})],
        "browse (episodes, page 1)": [("GET", "/v1/episodes", {"limit": 50})],
        "browse (episodes as of 30 days ago)": [("GET", "/v1/episodes", {"limit": 50, "as_of": then})],
        "browse (knowledge assets, page 1)": [("GET", "/v1/knowledge/assets", {"limit": 50})],
        "browse (knowledge assets, one kind, as of 30 days ago)": [
            ("GET", "/v1/knowledge/assets", {"limit": 50, "kind": "glossary", "as_of": then})
        ],
        "browse (a filter nothing matches: the whole org scanned)": [("GET", "/v1/memories", {"kind": "schema_hint"})],
        "browse (assets: a filter nothing matches)": [("GET", "/v1/knowledge/assets", {"label": "none-such"})],
        "item": [
            ("GET", f"/v1/memories/{mine}", {}),
            ("GET", f"/v1/lineage/memory/{mine}", {"direction": "both", "depth": 3}),
            ("GET", "/v1/retrievals", {"item_id": str(mine)}),
            ("GET", "/v1/audit", {"target_id": str(mine), "limit": 200}),
        ],
        "item (episode)": [
            ("GET", f"/v1/episodes/{episode}", {}),
            ("GET", f"/v1/lineage/episode/{episode}", {"direction": "both", "depth": 3}),
            ("GET", "/v1/retrievals", {"item_id": str(episode)}),
            ("GET", "/v1/audit", {"target_id": str(episode), "limit": 200}),
        ],
        "compliance": [
            ("GET", "/v1/jobs", {"kind": "forget_user", "limit": 100}),
            ("GET", "/v1/retention", {}),
            ("GET", "/v1/jobs", {"kind": "retention", "limit": 100}),
            ("GET", "/v1/audit", {"limit": 100}),
        ],
        "branches": [("GET", "/v1/branches", {})],
        "jobs": [("GET", "/openapi.json", {}), ("GET", "/v1/jobs", {"limit": 50})],
    }
    times: dict[str, list[float]] = {p: [] for p in pages}
    with httpx.Client(base_url=base, timeout=120, headers=h) as http:
        for _ in range(2):  # warm-up
            for calls in pages.values():
                for m, path, params in calls:
                    http.request(m, path, params=params).raise_for_status()
        for _ in range(args.rounds):
            for name, calls in pages.items():  # interleaved, so a noisy moment hits every page alike
                t = time.perf_counter()
                for m, path, params in calls:
                    http.request(m, path, params=params).raise_for_status()
                times[name].append(time.perf_counter() - t)
    result = {
        "n_memories": args.n,
        "n_episodes": args.n,
        "n_assets": args.n,
        "rounds": args.rounds,
        "pages": {k: summary_ms(v) for k, v in times.items()},
    }
    for k, v in result["pages"].items():
        print(f"{k:58s} p50 {v['p50_ms']:7.1f} ms  p95 {v['p95_ms']:7.1f} ms")
    write_result("console_render", result)


if __name__ == "__main__":
    main()
