"""The scaling bench inside a branch of a populated org: the same figures as in main,
and main byte-for-byte unchanged by the branch's run.

    .venv/bin/python -m bench.quality.memory_scaling.in_branch [bench.quality.memory_scaling's options] [--background-shards 2]

For each curve, one org is first populated in main with a background drawn from another seed
(its own spaces: labelled examples and user logs as episodes, its schemas and glossaries
bootstrapped with enrichment, so episodes, memories, assets, chunks and tree nodes all exist).
Then the curve runs twice in that org, shard by shard with the real jobs, as bench.quality.memory_scaling runs it:
first in main, then in a branch forked at the instant before main's run (so the branch sees the
background and none of main's run). Every measured point compares, question by question, the
keys found in /v1/context and the context tokens; after the branch's run, an md5 dump of the
org's main rows (every branched table) must equal the one taken before it. The background's
logs are not distilled before the fork: a branch's distillation starts from the beginning of
what it sees (docs/branches.md), so both runs distil background and curve logs alike.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.quality.memory_scaling.__main__ import parse

CURVE_OF = {"labelled": ["labelled"], "unlabelled": ["unlabelled_judge"], "bootstrap": ["bootstrap", "bootstrap_enriched"]}


def _populate(h, org, bg) -> None:
    for shard in bg.labelled:
        h.ingest(org, shard, user="steward", source="background")
    for shard in bg.logs:
        h.ingest(org, shard, user="logs", source="background")
    for sp in bg.spaces:
        for part in bg.glossaries[sp.name]:
            h.bootstrap(org, sp, part, enrich=True)


def _point(h, org, tests, k: int) -> dict:
    from bench.quality.memory_scaling.run import probe_memory

    probes = [probe_memory(h, org, q) for q in tests]
    hits = [set(p.question.keys) <= p.found for p in probes]
    return {
        "shards": k,
        "hit_rate": round(sum(hits) / len(hits), 4),
        "tokens": [p.tokens for p in probes],
        "found": [sorted(p.found) for p in probes],
    }


def _same(m: dict, b: dict) -> dict:
    n = len(m["found"])
    return {
        "shards": m["shards"],
        "hit_rate_main": m["hit_rate"],
        "hit_rate_branch": b["hit_rate"],
        "questions_same_keys": sum(x == y for x, y in zip(m["found"], b["found"])),
        "questions": n,
        "questions_same_tokens": sum(x == y for x, y in zip(m["tokens"], b["tokens"])),
        "tokens_mean_main": round(sum(m["tokens"]) / n, 1),
        "tokens_mean_branch": round(sum(b["tokens"]) / n, 1),
    }


def main(argv: list[str] | None = None, *, embedder=None) -> dict:
    from app.config import Settings
    from bench.command import save
    from bench.common import main_dump
    from bench.quality.memory_scaling.curves import draw, run_curve
    from bench.quality.memory_scaling.run import Harness

    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--background-shards", type=int, default=2)
    known, rest = extra.parse_known_args(argv)
    a = parse(rest + (["--name", "scaling_in_branch"] if "--name" not in rest else []))
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="memscale_scaling_branch_"))
    (tmp / "background").mkdir()
    data = draw(a, tmp)
    bg = draw(
        argparse.Namespace(**{**vars(a), "seed": a.seed + 1000, "points": list(range(known.background_shards + 1))}),
        tmp / "background",
    )
    h = Harness("memscale_bench_scaling_branch", model=a.model or Settings().llm_model, budget=a.budget, embedder=embedder)
    curves: dict[str, dict] = {}
    try:
        for name in [c for group in ("labelled", "unlabelled", "bootstrap") if group in a.curves for c in CURVE_OF[group]]:
            t0 = time.perf_counter()
            org = h.new_org(name)
            _populate(h, org, bg)
            time.sleep(0.01)
            fork = datetime.now(UTC)
            time.sleep(0.01)
            main_pts: list[dict] = []
            run_curve(h, org, name, data, a.points, lambda k, pts=main_pts, org=org: pts.append(_point(h, org, data.tests, k)))
            before = main_dump(h.admin, org.id)
            b = org.clients["steward"].create_branch("trial", at=fork)
            borg = org.in_branch("trial", b["id"])
            branch_pts: list[dict] = []
            run_curve(
                h, borg, name, data, a.points, lambda k, pts=branch_pts, borg=borg: pts.append(_point(h, borg, data.tests, k))
            )
            after = main_dump(h.admin, org.id)
            curves[name] = {
                "points": [_same(m, x) for m, x in zip(main_pts, branch_pts)],
                "main_unchanged": before == after,
                "main_rows": before,
                "seconds": round(time.perf_counter() - t0, 1),
            }
            pts = curves[name]["points"]
            print(
                f"  {name:<20} main unchanged {before == after}; "
                + "  ".join(
                    f"{p['shards']}: {p['hit_rate_main']:.3f}/{p['hit_rate_branch']:.3f} "
                    f"same {p['questions_same_keys']}/{p['questions']}"
                    for p in pts
                ),
                flush=True,
            )
    finally:
        h.close()
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "benchmark": "scaling_in_branch",
        "seed": a.seed,
        "background_seed": a.seed + 1000,
        "background_shards": known.background_shards,
        "spaces": len(data.spaces),
        "test_questions": len(data.tests),
        "points": a.points,
        "budget_tokens": a.budget,
        "curves": curves,
        "all_equal": all(
            p["questions_same_keys"] == p["questions"] == p["questions_same_tokens"] for c in curves.values() for p in c["points"]
        ),
        "main_unchanged": all(c["main_unchanged"] for c in curves.values()),
        "seconds": round(time.perf_counter() - started, 1),
    }
    return save(Path(a.out) / f"{a.name}.json", result, markdown(result))


def markdown(r: dict) -> str:
    lines = [
        f"# Scaling bench inside a branch (seed {r['seed']}, background seed {r['background_seed']}, "
        f"{r['test_questions']} questions)",
        "",
        f"All points equal question by question: **{r['all_equal']}**; main unchanged: **{r['main_unchanged']}**.",
        "",
        "| curve | shards | hit rate main | hit rate branch | same keys | same tokens | tokens main / branch |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, c in r["curves"].items():
        for p in c["points"]:
            lines.append(
                f"| {name} | {p['shards']} | {p['hit_rate_main']:.1%} | {p['hit_rate_branch']:.1%} | "
                f"{p['questions_same_keys']}/{p['questions']} | {p['questions_same_tokens']}/{p['questions']} | "
                f"{p['tokens_mean_main']} / {p['tokens_mean_branch']} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
