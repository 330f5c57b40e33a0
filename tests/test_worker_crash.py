"""A worker killed with SIGKILL mid-distillation; a new worker finishes the job with no
duplicate and no missing memory (real processes, real local model)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import text


def _worker(settings, org: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "MEMSCALE_DATABASE_URL": settings.database_url,
        "MEMSCALE_DATA_DIR": str(settings.data_dir),
        "MEMSCALE_LOG_LEVEL": "WARNING",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "app", "worker", "--kind", "distill", "--lease", "3", "--no-schedule", "--org", org],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _job(admin_engine, job_id):
    with admin_engine.connect() as c:
        return c.execute(text("SELECT status, progress, stats, error, attempts FROM jobs WHERE id = :i"), {"i": job_id}).one()


@pytest.mark.slow
def test_worker_killed_mid_job_resumes_without_duplicates(client, world, settings, admin_engine):
    org = world.org()
    steward = world.user(org, roles=["steward"])
    # Enough distinct rules, one per batch, that the job is still running when the first worker is
    # killed: the rule-based distillation handles ~15 episodes a second, so three finished before a
    # poll could see the job half done.
    systems = ["billing", "search", "payments", "auth", "exports", "ingest", "reports", "mobile", "crm", "etl"]
    contents = [f"Always run the {s} linter before pushing change set {i}." for i in range(6) for s in systems]
    r = client.post("/v1/episodes/batch", json={"items": [{"kind": "note", "content": c} for c in contents]}, headers=steward.h)
    assert r.status_code == 201, r.text
    time.sleep(0.2)
    r = client.post("/v1/jobs", json={"kind": "distill", "params": {"batch_size": 1, "min_age_s": 0}}, headers=steward.h)
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    # The queue is shared by the whole test session (schemathesis, for one, queues jobs no worker
    # runs): these workers serve this org only, as a tenant's dedicated worker would.

    w1 = _worker(settings, org)
    deadline = time.time() + 240
    while time.time() < deadline and _job(admin_engine, job_id).progress <= 0:
        assert w1.poll() is None, w1.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    state = _job(admin_engine, job_id)
    assert 0 < state.progress < 1 and state.status == "running", state
    w1.send_signal(signal.SIGKILL)
    w1.wait(timeout=30)

    w2 = _worker(settings, org)
    try:
        while time.time() < deadline and _job(admin_engine, job_id).status == "running":
            time.sleep(0.5)
        final = _job(admin_engine, job_id)
    finally:
        w2.send_signal(signal.SIGTERM)
        w2.wait(timeout=30)
    assert final.status == "succeeded", final
    assert final.attempts == 2 and final.stats["seen"] == len(contents)
    with admin_engine.connect() as c:
        unjudged = c.execute(
            text("SELECT count(*) FROM episodes WHERE org_id = :o AND quality IS NULL"), {"o": steward.org_id}
        ).scalar()
        dups = c.execute(
            text(
                "SELECT text, count(*) FROM memories WHERE org_id = :o AND status = 'active' "
                "GROUP BY owner_id, text HAVING count(*) > 1"
            ),
            {"o": steward.org_id},
        ).all()
        per_episode = c.execute(
            text(
                "SELECT e.id, count(l.id) FROM episodes e LEFT JOIN lineage_edges l ON l.to_id = e.id "
                "AND l.relation = 'distilled_from' WHERE e.org_id = :o GROUP BY e.id"
            ),
            {"o": steward.org_id},
        ).all()
    assert unjudged == 0 and dups == []
    # Every episode states a rule, so each one is the source of at least one memory: none is missing.
    assert all(n >= 1 for _, n in per_episode), per_episode
