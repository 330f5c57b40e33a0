"""The job queue: API creation and validation, periodic scheduling without duplicates, the
foreground CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sqlalchemy import text


def test_post_jobs_validates_and_authorises(client, world):
    org = world.org()
    member, steward = world.user(org), world.user(org, roles=["steward"])
    assert client.post("/v1/jobs", json={"kind": "distill"}, headers=member.h).status_code == 403
    r = client.post("/v1/jobs", json={"kind": "distill", "params": {"batch_size": 0}}, headers=steward.h)
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
    assert client.post("/v1/jobs", json={"kind": "explode"}, headers=steward.h).status_code == 422
    r = client.post("/v1/jobs", json={"kind": "bootstrap", "params": {"schema_url": "sqlite:///x.db"}}, headers=steward.h)
    assert r.status_code == 403  # database URLs as sources are for admins
    r = client.post("/v1/jobs", json={"kind": "consolidate"}, headers=steward.h)
    assert r.status_code == 202
    job = client.get(f"/v1/jobs/{r.json()['id']}", headers=steward.h).json()
    assert job["status"] == "queued" and job["progress"] == 0
    assert client.get(f"/v1/jobs/{r.json()['id']}", headers=member.h).status_code == 404  # not theirs


def test_a_worker_for_some_orgs_claims_only_their_jobs(client, world, app, admin_engine):
    from app.jobs.runner import claim

    orgs = [world.org(), world.org()]
    ids = [client.post("/v1/jobs", json={"kind": "consolidate"}, headers=world.user(o, roles=["steward"]).h).json()["id"]
           for o in orgs]
    row = claim(app.state.sessions, "test-worker", 60, ["consolidate"], [world.orgs[orgs[1]]])
    assert str(row.id) == ids[1] and row.org_id == world.orgs[orgs[1]]
    assert claim(app.state.sessions, "test-worker", 60, ["consolidate"], [world.orgs[orgs[1]]]) is None  # none left
    with admin_engine.connect() as c:
        status = dict(c.execute(text("SELECT id::text, status FROM jobs WHERE id = ANY(CAST(:i AS uuid[]))"), {"i": ids}).all())
    assert status == {ids[0]: "queued", ids[1]: "running"}


def test_periodic_jobs_are_enqueued_once_per_slot(app, world, admin_engine):
    from app.jobs.runner import enqueue_due

    org = world.org()
    world.user(org)
    now = 1_800_000_000.0
    mine = {world.orgs[org]}
    enqueue_due(app.state.sessions, now, only_orgs=mine)
    enqueue_due(app.state.sessions, now + 1, only_orgs=mine)  # a second scheduler, same slot: nothing new
    with admin_engine.connect() as c:
        kinds = c.execute(text("SELECT kind FROM jobs WHERE org_id = :o AND schedule_slot IS NOT NULL ORDER BY kind"),
                          {"o": world.orgs[org]}).scalars().all()
    assert kinds == ["consolidate", "distill", "retention"]
    enqueue_due(app.state.sessions, now + 3600, only_orgs=mine)  # the next hour: distill again, the daily ones not
    with admin_engine.begin() as c:
        n = c.execute(text("SELECT count(*) FROM jobs WHERE org_id = :o AND kind = 'distill'"), {"o": world.orgs[org]}).scalar()
    assert n == 2


def test_jobs_run_in_the_foreground(settings, world, tmp_path):
    org = world.org()
    world.user(org, roles=["steward"])
    (tmp_path / "a.md").write_text("# Runbook\n\nRestart the ingest worker with systemctl.")
    env = {**os.environ, "MEMSCALE_DATABASE_URL": settings.database_url, "MEMSCALE_DATA_DIR": str(settings.data_dir)}
    r = subprocess.run([sys.executable, "-m", "app", "jobs", "run", "bootstrap", "--org", org, "--param", f"path={tmp_path}",
                        "--param", "visibility=org"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "succeeded" and out["stats"]["created"] == 1
    assert "bootstrap" in r.stderr  # the progress bar
