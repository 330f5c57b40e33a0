"""Branches and as-of reads at scale: branch creation time, search latency in a
branch vs main, as-of search vs a current search, and main left byte-for-byte unchanged by work
in a branch — all over HTTP against the real service, side by side in one run.

    .venv/bin/python -m bench.speed.branches [--n 100000] [--base 12000] [--queries 60] [--branch-ops 600]

Data: one org of `--n` memories (org-visible; embeddings as in bench/speed/filtered_knn: `--base`
real all-MiniLM-L6-v2 embeddings, the rest derived mixtures), COPYed in with their HNSW index.
Then `--branch-ops` writes in a branch (a third new memories, a third new versions of main
memories, a third deletions of main memories) and as many writes in main after the fork, so both
sides have diverged. Searches (hybrid, memories, k = 10) for real query embeddings run in four
states per query in shuffled order: main now, the branch, main as of an instant before main's
later writes, the branch as of that instant. A fresh branch (no writes of its own) must return
exactly main's results, and a dump of main's rows (md5 per table) must not change while work
(writes, a consolidation job) runs in the branch.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from bench.command import parser, save
from bench.common import fresh_database, main_dump, pct, serve_in_thread, summary_ms
from bench.speed.filtered_knn.__main__ import FRACTIONS, derive, embed_base
from bench.speed.filtered_knn.__main__ import load as load_rows


def run(args) -> dict:
    from app.jobs.runner import JobContext, Resources, run_job
    from app.kit.runtime.embedding import LocalEmbedder
    from app.main import create_app
    from app.orgs import service as orgs
    from bench.speed.service.data import query

    settings = fresh_database("memscale_bench_branches").model_copy(update={"log_level": "WARNING"})
    embedder = LocalEmbedder()
    vecs = derive(embed_base(args.base, settings.data_dir.resolve() / "bench-cache"), args.n)
    built = load_rows(settings, vecs)
    admin = create_engine(settings.database_url)
    with admin.begin() as c:  # the loader's rows are group-visible to `all`: make them the org's
        c.execute(
            text(
                "UPDATE memories SET visibility = 'org', groups = '{}', text = 'memory ' || id::text,"
                " recorded_at = now() - interval '1 hour' WHERE org_id = :o"
            ),
            {"o": built["org"]},
        )
        c.execute(text("ANALYZE memories"))
    with Session(admin, expire_on_commit=False, info={"audit_key": settings.audit_secret()}) as db:
        org = orgs.org_by_name(db, "knn")
        steward = orgs.create_user(db, org, "steward", roles=("steward",))
        key = orgs.create_key(db, steward)
        db.commit()
    print(f"loaded {args.n} memories: copy {built['copy_s']} s, HNSW {built['index_build_s']} s")
    app = create_app(settings, embedder=embedder)
    http = httpx.Client(base_url=serve_in_thread(app), timeout=300, headers={"Authorization": f"Bearer {key}"})
    in_branch = {"Memscale-Branch": "trial"}

    def ok(r):
        assert r.status_code < 300, r.text
        return r.json()

    # 1. Creation: O(1) whatever the org's size.
    create_s = []
    for i in range(20):
        t0 = time.perf_counter()
        ok(http.post("/v1/branches", json={"name": f"empty{i}"}))
        create_s.append(time.perf_counter() - t0)
    before = main_dump(admin, built["org"])
    t0 = time.perf_counter()
    ok(http.post("/v1/branches", json={"name": "trial"}))
    create_s.append(time.perf_counter() - t0)

    # 2. Diverge: writes in the branch and in main after the fork.
    rng = random.Random(3)
    with admin.connect() as c:
        ids = [
            str(i)
            for i in c.execute(
                text("SELECT id FROM memories WHERE org_id = :o ORDER BY random() LIMIT :n"),
                {"o": built["org"], "n": args.branch_ops},
            ).scalars()
        ]
    third = args.branch_ops // 3
    for _ in range(third):
        ok(http.post("/v1/memories", json={"text": query(rng), "kind": "fact", "visibility": "org"}, headers=in_branch))
    for mid in ids[:third]:
        ok(http.patch(f"/v1/memories/{mid}", json={"text": query(rng)}, headers=in_branch))
    for mid in ids[third : 2 * third]:
        assert http.delete(f"/v1/memories/{mid}", headers=in_branch).status_code == 204
    after_branch_writes = main_dump(admin, built["org"])
    as_of = datetime.now(UTC).isoformat()
    time.sleep(0.05)
    for mid in ids[2 * third :]:
        ok(http.patch(f"/v1/memories/{mid}", json={"text": query(rng)}))
    for _ in range(third):
        ok(http.post("/v1/memories", json={"text": query(rng), "kind": "fact", "visibility": "org"}))
    main_before_job = main_dump(admin, built["org"])
    ok(http.post("/v1/branches", json={"name": "fresh"}))  # no writes of its own: must read as main does

    # 3. Search latency in four states, per query in shuffled order.
    qtexts = [query(random.Random(100 + i)) for i in range(args.queries)]
    states = {"main": ({}, None), "branch": (in_branch, None), "main_as_of": ({}, as_of), "branch_as_of": (in_branch, as_of)}
    lat: dict[str, list[float]] = {s: [] for s in states}
    same_as_main = 0
    for qi, q in enumerate(qtexts):
        order = list(states)
        random.Random(qi).shuffle(order)
        for s in order:
            headers, at = states[s]
            body = {"query": q, "types": ["memory"], "k": 10, **({"as_of": at} if at else {})}
            t0 = time.perf_counter()
            r = http.post("/v1/search", json=body, headers=headers)
            lat[s].append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
        fresh = ok(http.post("/v1/search", json={"query": q, "types": ["memory"], "k": 10}, headers={"Memscale-Branch": "fresh"}))
        main_now = ok(http.post("/v1/search", json={"query": q, "types": ["memory"], "k": 10}))
        same_as_main += [x["id"] for x in fresh["results"]] == [x["id"] for x in main_now["results"]]

    # 4. A consolidation job in the branch (its pairwise clustering is quadratic in an org's
    # memories: run where it fits); main's rows unchanged by everything done in the branch.
    done, consolidate_s = None, 0.0
    if args.n <= args.job_max_n:
        job = ok(http.post("/v1/jobs", json={"kind": "consolidate"}, headers=in_branch))
        t0 = time.perf_counter()
        done = run_job(
            JobContext(
                settings=settings,
                sessions=app.state.sessions,
                org_id=built["org"],
                job_id=job["id"],
                resources=Resources(settings, _embedder=embedder),
            )
        )
        consolidate_s = time.perf_counter() - t0
    diff = ok(http.get("/v1/branches/trial/diff"))
    t0 = time.perf_counter()
    assert http.delete("/v1/branches/trial").status_code == 204
    drop_s = time.perf_counter() - t0
    main_after_job = main_dump(admin, built["org"])
    admin.dispose()

    http_ms = {s: summary_ms(v) for s, v in lat.items()}
    return {
        "n": args.n,
        "queries": len(qtexts),
        "branch_ops": args.branch_ops,
        "visible_fractions": list(FRACTIONS),
        "create_ms": {"p50": round(pct([x * 1000 for x in create_s], 50), 2), "max": round(max(create_s) * 1000, 2)},
        "search_http": http_ms,
        "ratios_p95": {
            "branch/main": round(http_ms["branch"]["p95_ms"] / http_ms["main"]["p95_ms"], 3),
            "main_as_of/main": round(http_ms["main_as_of"]["p95_ms"] / http_ms["main"]["p95_ms"], 3),
            "branch_as_of/branch": round(http_ms["branch_as_of"]["p95_ms"] / http_ms["branch"]["p95_ms"], 3),
        },
        "fresh_branch_same_top10_as_main": f"{same_as_main}/{len(qtexts)}",
        "main_unchanged_by_branch_writes": before == after_branch_writes,
        "main_unchanged_by_branch_job_and_drop": main_before_job == main_after_job,
        "consolidate_in_branch": {"status": done.status, "stats": done.stats, "s": round(consolidate_s, 1)}
        if done
        else f"skipped (n > {args.job_max_n})",
        "branch_changes": len(diff["changes"]),
        "drop_ms": round(drop_s * 1000, 1),
        "main_dump": before,
    }


def markdown(res: dict) -> str:
    lines = [
        f"branches: {res['n']} memories, {res['branch_ops']} branch writes, {res['queries']} queries (hybrid, k=10)",
        "",
        f"- create a branch: p50 {res['create_ms']['p50']} ms, max {res['create_ms']['max']} ms",
        f"- drop a branch with {res['branch_changes']} changes: {res['drop_ms']} ms",
        f"- fresh branch returns main's top 10: {res['fresh_branch_same_top10_as_main']}",
        f"- main's rows unchanged by the branch's writes: {res['main_unchanged_by_branch_writes']}, "
        f"by a consolidation job in the branch and dropping it: {res['main_unchanged_by_branch_job_and_drop']}",
        f"- consolidation in the branch: {res['consolidate_in_branch']}",
        "",
        "| state | HTTP p50 ms | HTTP p95 ms |",
        "|---|---|---|",
    ]
    for s, v in res["search_http"].items():
        lines.append(f"| {s} | {v['p50_ms']} | {v['p95_ms']} |")
    lines += ["", "p95 ratios: " + ", ".join(f"{k} {v}" for k, v in res["ratios_p95"].items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "branches")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--base", type=int, default=12_000)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--branch-ops", type=int, default=600)
    ap.add_argument("--job-max-n", type=int, default=5000, help="run the consolidation job in the branch up to this n")
    args = ap.parse_args(argv)
    res = run(args)
    return save(args.out, res, markdown(res))


if __name__ == "__main__":
    main()
