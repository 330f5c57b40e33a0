"""bench/quality/pipelines: distillation throughput with the configured LLM (default: local SmolLM2) and
consolidation on a data set with planted duplicates and contradictions.

    .venv/bin/python -m bench.quality.pipelines [--episodes 24]
"""

from __future__ import annotations

import random
import time

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from bench.command import parser, save
from bench.common import fresh_database

TOPICS = [
    "the billing dashboard",
    "the staging cluster",
    "customer exports",
    "the release checklist",
    "the vpn",
    "the data warehouse",
    "on-call handover",
    "the api gateway",
    "expense reports",
    "the crm",
]
RULE_FORMS = [
    "I always check {t} before approving refunds.",
    "We never change {t} on Fridays.",
    "I prefer to review {t} in the morning.",
    "Use {t} for quarterly reports.",
    "Hi, thanks, see you tomorrow!",
    "The weather is nice today, lunch was good.",
]
# (original, paraphrase) pairs that mean the same, and (old, new) pairs that contradict.
DUPLICATES = [
    ("Production deploys require two approvals.", "Production deploys need two approvals."),
    ("Invoices are sent on the first business day.", "Invoices are sent on the 1st business day."),
    ("Use the eu-west bucket for customer exports.", "Use the eu-west bucket for all customer exports."),
    ("The VPN is required for the admin panel.", "The VPN is required to reach the admin panel."),
    ("Expense reports are due every Friday.", "Expense reports are due each Friday."),
    ("Alice owns the billing dashboard.", "Alice is the owner of the billing dashboard."),
    ("Kafka lag alerts page the platform team.", "Kafka lag alerts page the platform team on call."),
    ("Backups run nightly at 2am.", "Backups run every night at 2am."),
]
CONFLICTS = [
    ("The on-call rotation changes on Monday.", "The on-call rotation changes on Wednesday."),
    ("Log retention is 30 days.", "Log retention is 90 days."),
    ("Use the VPN for the staging cluster.", "Do not use the VPN for the staging cluster."),
    ("Quarterly reports are due on the 5th.", "Quarterly reports are due on the 10th."),
    ("Customer data exports are allowed for support.", "Customer data exports are blocked for support."),
    ("The standup starts at 9 am.", "The standup starts at 10 am."),
]
DISTINCT = [
    "The design review happens every second Thursday.",
    "Grafana dashboards live in the ops folder.",
    "Sales uses Salesforce for pipeline tracking.",
    "The mobile app ships every two weeks.",
    "Security reviews are needed for new vendors.",
    "The warehouse refreshes at 6am UTC.",
    "Support tickets are triaged within four hours.",
    "Feature flags are managed in LaunchDarkly.",
]


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "pipelines")
    ap.add_argument("--episodes", type=int, default=24)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)

    from app.jobs import service as jobs_service
    from app.jobs.runner import JobContext, Resources, run_job
    from app.kit.database.db import bind_principal
    from app.main import create_app
    from app.orgs import service as orgs

    settings = fresh_database("memscale_bench_pipe").model_copy(update={"log_level": "WARNING"})
    admin = create_engine(settings.database_url)
    with Session(admin, expire_on_commit=False) as db:
        org = orgs.create_org(db, "bench")
        users = [orgs.create_user(db, org, f"u{i}", roles=["steward"]) for i in range(3)]
        keys = [orgs.create_key(db, u) for u in users]
        db.commit()
    resources = Resources(settings)
    app = create_app(settings, embedder=resources.embedder)
    with TestClient(app) as client:
        for i in range(args.episodes):
            form = rng.choice(RULE_FORMS)
            client.post(
                "/v1/episodes",
                json={
                    "kind": "conversation",
                    "content": form.format(t=rng.choice(TOPICS)),
                    "visibility": rng.choice(["private", "org"]),
                },
                headers={"Authorization": f"Bearer {keys[i % 3]}"},
            ).raise_for_status()
        for a, b in DUPLICATES + CONFLICTS:
            for t in (a, b):
                client.post(
                    "/v1/memories",
                    json={"text": t, "kind": "rule", "visibility": "org"},
                    headers={"Authorization": f"Bearer {keys[0]}"},
                ).raise_for_status()
                time.sleep(0.01)  # the second of each pair is the newer one
        for t in DISTINCT:
            client.post(
                "/v1/memories",
                json={"text": t, "kind": "fact", "visibility": "org"},
                headers={"Authorization": f"Bearer {keys[0]}"},
            ).raise_for_status()

        def job(kind: str, params: dict):
            with app.state.sessions() as db:
                bind_principal(db, None, org_id=org.id, all_scopes=True)
                j = jobs_service.create(db, org_id=org.id, actor_id=None, kind=kind, params=params, status="running")
                db.commit()
            return run_job(
                JobContext(settings=settings, sessions=app.state.sessions, org_id=org.id, job_id=j.id, resources=resources)
            )

        resources.gateway.warm_up() if hasattr(resources.gateway, "warm_up") else None
        t0 = time.perf_counter()
        d = job("distill", {"min_age_s": 0, "batch_size": 8})
        distill_s = time.perf_counter() - t0
        with admin.connect() as c:
            before = c.execute(
                text("SELECT count(*) FROM memories WHERE org_id = :o AND status = 'active'"), {"o": org.id}
            ).scalar()
        t0 = time.perf_counter()
        cons = job("consolidate", {})
        consolidate_s = time.perf_counter() - t0
        with admin.connect() as c:
            status = dict(
                c.execute(
                    text("SELECT text, status FROM memories WHERE org_id = :o AND provenance->>'origin' = 'api'"), {"o": org.id}
                ).all()
            )
            after = c.execute(
                text("SELECT count(*) FROM memories WHERE org_id = :o AND status = 'active'"), {"o": org.id}
            ).scalar()
    dup_caught = sum(1 for a, b in DUPLICATES if sorted([status[a], status[b]]) == ["active", "superseded"])
    conf_caught = sum(1 for a, b in CONFLICTS if status[a] == "superseded" and status[b] == "active")
    false_hits = sum(1 for t in DISTINCT if status[t] != "active")
    result = {
        "llm_model": settings.llm_model,
        "episodes": args.episodes,
        "distill_seconds": round(distill_s, 1),
        "episodes_per_minute": round(args.episodes / distill_s * 60, 1),
        "distill_stats": d.stats,
        "memories_active_before_consolidation": before,
        "memories_active_after": after,
        "planted_duplicates": len(DUPLICATES),
        "duplicates_caught": dup_caught,
        "planted_contradictions": len(CONFLICTS),
        "contradictions_resolved_newer_wins": conf_caught,
        "distinct_wrongly_touched": false_hits,
        "consolidate_seconds": round(consolidate_s, 2),
        "consolidate_stats": cons.stats,
    }
    print(f"\nbench.quality.pipelines  model={settings.llm_model}")
    print(
        f"  distillation: {args.episodes} episodes in {distill_s:.1f}s = {result['episodes_per_minute']} episodes/min; "
        f"kept {d.stats.get('kept')}, skipped {d.stats.get('skipped')}, quarantined {d.stats.get('quarantined')}, "
        f"memories {d.stats.get('memories_created')} (llm {d.stats.get('llm_memories')}, rule {d.stats.get('rule_memories')})"
    )
    print(f"  consolidation: active memories {before} -> {after} in {consolidate_s:.2f}s")
    print(f"    planted duplicates caught      {dup_caught}/{len(DUPLICATES)}")
    print(f"    planted contradictions resolved {conf_caught}/{len(CONFLICTS)} (newer wins)")
    print(f"    distinct memories wrongly merged/superseded {false_hits}/{len(DISTINCT)}")
    return save(args.out, result)


if __name__ == "__main__":
    main()
