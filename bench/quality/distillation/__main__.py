"""bench/quality/distillation: lesson recall, precision, chatter yield, duplicates, scope and statement
quality of the distillation job on hand-labelled traces (``bench/quality/distillation/data.py``).

    .venv/bin/python -m bench.quality.distillation [--split dev,test] [--model local/smollm2] [--quick]

Everything runs through the real service: a fresh database in the embedded Postgres, one org
per split with four users (alice: finance, bob: eng, carol: finance+eng, dave), every trace
posted by its owner with its visibility through ``POST /v1/episodes``, then the ``distill`` job
as ``memscale jobs run distill`` runs it, with the configured LLM (``--model``: any litellm
model string; default the bundled SmolLM2-135M). Memories and their ``distilled_from`` lineage
are read back from the database and scored by ``bench.quality.distillation.score``. Tune on ``dev``,
report ``test``.
"""

from __future__ import annotations

import time

from bench.quality.distillation.data import USERS
from bench.quality.distillation.data import split as split_traces
from bench.quality.distillation.score import Mem, score


def run_split(harness: dict, name: str, traces, *, verbose: bool = False) -> dict:
    from fastapi.testclient import TestClient  # noqa: F401
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    from app.jobs import service as jobs_service
    from app.jobs.runner import JobContext, run_job
    from app.kit.database.db import bind_principal
    from app.orgs import service as orgs

    app, admin, http, settings, resources = (harness[k] for k in ("app", "admin", "http", "settings", "resources"))
    with Session(admin, expire_on_commit=False) as db:
        org = orgs.create_org(db, f"distill-{name}-{int(time.time())}")
        users = {u: orgs.create_user(db, org, u, groups=list(gs)) for u, gs in USERS.items()}
        keys = {u: orgs.create_key(db, users[u]) for u in USERS}
        db.commit()
    names = {users[u].id: u for u in USERS}
    by_episode = {}
    for t in traces:
        body = {"kind": t.kind, "content": t.content, "visibility": t.visibility}
        if t.groups:
            body["groups"] = list(t.groups)
        if t.outcome:
            body["outcome"] = t.outcome
        r = http.post("/v1/episodes", json=body, headers={"Authorization": f"Bearer {keys[t.owner]}"})
        r.raise_for_status()
        by_episode[r.json()["id"]] = t.id
    with app.state.sessions() as db:
        bind_principal(db, None, org_id=org.id, all_scopes=True)
        job = jobs_service.create(
            db, org_id=org.id, actor_id=None, kind="distill", params={"min_age_s": 0, "batch_size": 8}, status="running"
        )
        db.commit()
    t0 = time.perf_counter()
    done = run_job(JobContext(settings=settings, sessions=app.state.sessions, org_id=org.id, job_id=job.id, resources=resources))
    seconds = time.perf_counter() - t0
    if done.status != "succeeded":
        raise RuntimeError(f"distill failed: {done.error}")
    with admin.connect() as c:
        rows = c.execute(
            text(
                "SELECT m.id, m.text, m.owner_id, m.visibility, m.groups, m.labels, m.provenance->>'method' AS method, "
                "array_agg(l.to_id::text) AS sources FROM memories m JOIN lineage_edges l ON l.from_id = m.id "
                "AND l.relation = 'distilled_from' WHERE m.org_id = :o AND m.status = 'active' "
                "GROUP BY m.org_id, m.id ORDER BY m.recorded_at, m.id"
            ),
            {"o": org.id},
        ).all()
    mems = [
        Mem(
            str(r.id),
            r.text,
            names[r.owner_id],
            r.visibility,
            tuple(r.groups),
            tuple(r.labels),
            sorted({by_episode[s] for s in r.sources if s in by_episode}),
            r.method or "",
        )
        for r in rows
    ]
    result = score(traces, mems, seconds=seconds)
    result["job_stats"] = done.stats
    result["memory_texts"] = [
        f"{m.text} <- {','.join(m.sources)} [{m.visibility}{':' + ','.join(m.groups) if m.groups else ''}]" for m in mems
    ]
    _print(name, result, verbose)
    return result


def _print(name: str, r: dict, verbose: bool) -> None:
    print(
        f"\n[{name}] {r['traces']} traces ({r['lesson_labels']} lesson labels, {r['chatter_traces']} chatter) "
        f"-> {r['memories']} memories in {r['seconds']}s ({r['episodes_per_minute']} episodes/min)"
    )
    print(
        f"  lesson recall {r['lesson_recall']:.3f} (unique lessons {r['unique_lesson_recall']:.3f})  "
        f"precision {r['precision'] if r['precision'] is None else format(r['precision'], '.3f')}  "
        f"chatter yield {r['chatter_yield']:.3f}  duplicate rate {r['duplicate_rate']:.3f}"
    )
    print(
        f"  scope: wider than sources {r['scope_wider']}, exact audience {r['scope_exact']:.3f}   "
        f"statements: speaker prefix {r['speaker_prefix']}, one sentence {r['one_sentence']:.3f}, "
        f"self-contained {r['self_contained']:.3f}, keys kept {r['keys_kept']:.3f}"
    )
    print("  recall by category: " + ", ".join(f"{c} {v['recall']:.2f} (n={v['labels']})" for c, v in r["per_category"].items()))
    print(f"  memories by method: {r['methods']}")
    if verbose:
        for label, items in (
            ("missed", r["missed"]),
            ("wrong", r["wrong"]),
            ("chatter", r["chatter_memories"]),
            ("bad statement", r["bad_statements"]),
            ("memory", r["memory_texts"]),
        ):
            for x in items:
                print(f"    {label}: {x}")


def main(argv: list[str] | None = None, *, embedder=None) -> dict:
    from bench.command import parser, save

    ap = parser(__doc__, "distillation", folder=True)
    ap.add_argument("--split", default="dev,test", help="dev, test, all, fresh, holdout, or a comma list (one org each)")
    ap.add_argument("--model", default=None, help="litellm model string (default: the configured MEMSCALE_LLM_MODEL)")
    ap.add_argument("--quick", action="store_true", help="a slice of dev (smoke test)")
    ap.add_argument("--verbose", "-v", action="store_true", help="list misses, wrong memories and every memory")
    ap.add_argument("--db", default="memscale_bench_distill", help="database name (dropped and recreated)")
    a = ap.parse_args(argv)

    from fastapi.testclient import TestClient
    from sqlalchemy import create_engine

    from app.jobs.runner import Resources
    from app.main import create_app
    from bench.common import fresh_database

    settings = fresh_database(a.db + ("_quick" if a.quick else "")).model_copy(
        update={"log_level": "WARNING", **({"llm_model": a.model} if a.model else {})}
    )
    resources = Resources(settings, _embedder=embedder)
    app = create_app(settings, embedder=resources.embedder, gateway=resources.gateway)
    admin = create_engine(settings.database_url)
    out = {"model": settings.llm_model, "splits": {}}
    with TestClient(app) as http:
        harness = {"app": app, "admin": admin, "http": http, "settings": settings, "resources": resources}
        if hasattr(resources.gateway, "warm_up") and not a.quick:  # load time stays out of the throughput
            resources.gateway.warm_up()
        names = ["quick"] if a.quick else [s.strip() for s in a.split.split(",") if s.strip()]
        for name in names:
            traces = _quick_slice() if name == "quick" else split_traces(name)
            out["splits"][name] = run_split(harness, name, traces, verbose=a.verbose)
    admin.dispose()
    return save(a.out / ("distillation_quick.json" if a.quick else "distillation.json"), out)


def _quick_slice():
    dev = split_traces("dev")
    lessons = [t for t in dev if t.lessons][:8]
    chatter = [t for t in dev if not t.lessons][:4]
    return lessons + chatter


if __name__ == "__main__":
    main()
