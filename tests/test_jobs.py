"""The job queue: API creation and validation, periodic scheduling without duplicates, the
foreground CLI; bounded parameters, cancellation and fair claiming across orgs (issue 41)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

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
    ids = [
        client.post("/v1/jobs", json={"kind": "consolidate"}, headers=world.user(o, roles=["steward"]).h).json()["id"]
        for o in orgs
    ]
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
        kinds = (
            c.execute(
                text("SELECT kind FROM jobs WHERE org_id = :o AND schedule_slot IS NOT NULL ORDER BY kind"),
                {"o": world.orgs[org]},
            )
            .scalars()
            .all()
        )
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
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "jobs",
            "run",
            "bootstrap",
            "--org",
            org,
            "--param",
            f"path={tmp_path}",
            "--param",
            "visibility=org",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "succeeded" and out["stats"]["created"] == 1
    assert "bootstrap" in r.stderr  # the progress bar


# --- issue 41: bounded parameters, cancellation, fair claiming ---------------------------------


def test_job_parameters_are_bounded(client, world):
    steward = world.user(world.org(), roles=["steward"])
    too_big = [
        ("train_cartridge", {"steps": 100_000}),
        ("train_cartridge", {"steps": 2001}),
        ("train_cartridge", {"p": 4097}),
        ("train_cartridge", {"asset_ids": [str(uuid.uuid4())] * 257}),
        ("consolidate", {"ttl_days": 1e300}),
        ("consolidate", {"ttl_days": 3654}),
        ("distill", {"batch_size": 65}),
        ("distill", {"min_age_s": 3601}),
    ]
    for kind, params in too_big:
        r = client.post("/v1/jobs", json={"kind": kind, "params": params}, headers=steward.h)
        assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error", (kind, params, r.text)
    for kind, params in (("train_cartridge", {"steps": 2000, "p": 4096}), ("consolidate", {"ttl_days": 3653})):
        r = client.post("/v1/jobs", json={"kind": kind, "params": params}, headers=steward.h)
        assert r.status_code == 202, r.text
        assert client.post(f"/v1/jobs/{r.json()['id']}/cancel", headers=steward.h).status_code == 200


def _audit(admin_engine, job_id) -> list[tuple]:
    with admin_engine.connect() as c:
        return [
            tuple(r)
            for r in c.execute(
                text("SELECT action, actor_id FROM audit_log WHERE target_id = :t ORDER BY seq"), {"t": job_id}
            ).all()
        ]


def test_cancel_who_may_and_a_cancelled_job_never_runs(client, world, app, admin_engine, run_job):
    from app.jobs.runner import claim

    org, other = world.org(), world.org()
    steward, admin = world.user(org, roles=["steward"]), world.user(org, roles=["admin"])
    member, auditor = world.user(org), world.user(org, roles=["auditor"])
    outsider = world.user(other, roles=["admin"])
    job = client.post("/v1/jobs", json={"kind": "consolidate"}, headers=steward.h).json()["id"]
    assert client.post(f"/v1/jobs/{job}/cancel", headers=outsider.h).status_code == 404  # another org's
    assert client.post(f"/v1/jobs/{job}/cancel", headers=member.h).status_code == 404  # not theirs to see
    r = client.post(f"/v1/jobs/{job}/cancel", headers=auditor.h)
    assert r.status_code == 403  # may see it, may not stop it
    assert client.post(f"/v1/jobs/{uuid.uuid4()}/cancel", headers=steward.h).status_code == 404
    r = client.post(f"/v1/jobs/{job}/cancel", headers=steward.h)
    assert r.status_code == 200 and r.json()["status"] == "cancelled" and r.json()["finished_at"]
    assert client.get(f"/v1/jobs/{job}", headers=steward.h).json()["status"] == "cancelled"
    r = client.post(f"/v1/jobs/{job}/cancel", headers=steward.h)
    assert r.status_code == 409 and r.json()["error"]["code"] == "job_finished"
    assert claim(app.state.sessions, "test-worker", 60, ["consolidate"], [world.orgs[org]]) is None  # never runs
    assert _audit(admin_engine, job) == [("job.create", steward.user_id), ("job.cancel", steward.user_id)]
    # An admin of the org may cancel a steward's job; a finished job is a 409 and stays as it was.
    queued = client.post("/v1/jobs", json={"kind": "consolidate"}, headers=steward.h).json()["id"]
    assert client.post(f"/v1/jobs/{queued}/cancel", headers=admin.h).json()["status"] == "cancelled"
    done = run_job(steward.org_id, "retention", created_by=steward.user_id)
    assert done.status == "succeeded"
    r = client.post(f"/v1/jobs/{done.id}/cancel", headers=steward.h)
    assert r.status_code == 409
    assert client.get(f"/v1/jobs/{done.id}", headers=steward.h).json()["status"] == "succeeded"


def _two_batches(ctx, job):
    from app.jobs import service as jobs_service

    for i in (1, 2):
        if i == 2:
            ctx.resources.extra["between_batches"]()
        with ctx.tx() as db:
            cursor = jobs_service.lock_cursor(db, ctx.org_id, "two-batches")
            cursor.position = {"batch": i}
            ctx.checkpoint(db, progress=i / 2, stats={"batch": i}, cursor={"batch": i})
    return {"batch": 2}


def test_a_running_job_stops_at_its_next_checkpoint_and_keeps_only_whole_batches(
    client, world, app, settings, embedder, admin_engine, monkeypatch
):
    from app.jobs import runner

    org = world.org()
    steward = world.user(org, roles=["steward"])
    monkeypatch.setitem(runner.PIPELINES, "consolidate", "tests.test_jobs:_two_batches")
    job = client.post("/v1/jobs", json={"kind": "consolidate"}, headers=steward.h).json()["id"]
    row = runner.claim(app.state.sessions, "test-worker", 60, ["consolidate"], [world.orgs[org]])
    assert str(row.id) == job

    def cancel() -> None:  # what the API does while the worker is between two batches
        r = client.post(f"/v1/jobs/{job}/cancel", headers=steward.h)
        assert r.status_code == 200 and r.json()["status"] == "cancelled"

    res = runner.Resources(settings, _embedder=embedder, extra={"between_batches": cancel})
    runner.run_job(
        runner.JobContext(
            settings=settings, sessions=app.state.sessions, org_id=row.org_id, job_id=row.id, resources=res, worker="test-worker"
        )
    )
    got = client.get(f"/v1/jobs/{job}", headers=steward.h).json()
    assert got["status"] == "cancelled" and got["stats"] == {"batch": 1} and got["progress"] == 0.5
    with admin_engine.connect() as c:
        position = c.execute(
            text("SELECT position FROM pipeline_cursors WHERE org_id = :o AND pipeline = 'two-batches'"), {"o": row.org_id}
        ).scalar_one()
        lease = c.execute(text("SELECT locked_by, locked_until FROM jobs WHERE id = :i"), {"i": job}).one()
    assert position == {"batch": 1}  # the second batch rolled back with its checkpoint
    assert tuple(lease) == (None, None)
    assert [a for a, _ in _audit(admin_engine, job)] == ["job.create", "job.cancel"]  # never marked succeeded


def test_a_cancelled_cartridge_training_stops_between_steps_and_leaves_nothing(
    client, world, app, settings, embedder, admin_engine, run_job, tmp_path, monkeypatch
):
    import pipelines.cartridges.job as cartridge_job
    import pipelines.cartridges.trainer as trainer
    from app.jobs import runner

    org = world.org()
    steward = world.user(org, roles=["steward"])
    (tmp_path / "doc.md").write_text("The help desk extension is 4471. Travel above 800 euros needs Ana Ruiz.")
    assert run_job(steward.org_id, "bootstrap", {"path": str(tmp_path), "visibility": "org"}).status == "succeeded"
    job = client.post("/v1/jobs", json={"kind": "train_cartridge", "params": {"p": 16, "steps": 5}}, headers=steward.h).json()[
        "id"
    ]
    steps = []

    def train(texts, hashes, out_dir, p, n_steps, *, check, **kw):
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "checkpoint.safetensors").write_bytes(b"partial")
        for step in range(n_steps):
            if step == 2:
                assert client.post(f"/v1/jobs/{job}/cancel", headers=steward.h).status_code == 200
            check()  # what context_distillation.train calls before every step
            steps.append(step)
        raise AssertionError("training ran past its cancellation")

    monkeypatch.setattr(trainer, "train_cartridge", train)
    monkeypatch.setattr(cartridge_job, "CHECK_EVERY_S", 0.0)
    row = runner.claim(app.state.sessions, "test-worker", 60, ["train_cartridge"], [world.orgs[org]])
    runner.run_job(
        runner.JobContext(
            settings=settings,
            sessions=app.state.sessions,
            org_id=row.org_id,
            job_id=row.id,
            resources=runner.Resources(settings, _embedder=embedder),
        )
    )
    assert steps == [0, 1]
    assert client.get(f"/v1/jobs/{job}", headers=steward.h).json()["status"] == "cancelled"
    from app.cartridges.service import folder

    assert not folder(settings.data_dir, uuid.UUID(job)).exists()
    with admin_engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM cartridges WHERE id = :i"), {"i": job}).scalar() == 0


def test_a_free_worker_takes_another_orgs_job_before_the_next_of_a_busy_org(client, world, app, admin_engine):
    """Org A queued three jobs, then org B one. A worker holding A's first job does not block B:
    the next claim takes B's (A already runs one), not A's second (the old oldest-first order)."""
    from app.jobs.runner import claim

    a, b = world.org(), world.org()
    sa, sb = world.user(a, roles=["steward"]), world.user(b, roles=["steward"])
    a_jobs = [client.post("/v1/jobs", json={"kind": "consolidate"}, headers=sa.h).json()["id"] for _ in range(3)]
    b_job = client.post("/v1/jobs", json={"kind": "consolidate"}, headers=sb.h).json()["id"]
    orgs = [world.orgs[a], world.orgs[b]]
    got = [str(claim(app.state.sessions, f"w{i}", 600, ["consolidate"], orgs).id) for i in range(3)]
    assert got == [a_jobs[0], b_job, a_jobs[1]]


def test_one_worker_alternates_between_orgs_instead_of_draining_one_backlog(client, world, app, run_job):
    """With a single worker nothing runs in parallel: after A's job finishes, B (never served)
    goes before A's next job although A's was queued first."""
    from app.jobs import service as jobs_service
    from app.jobs.runner import claim
    from app.kit.database.db import bind_principal, transaction

    a, b = world.org(), world.org()
    sa, sb = world.user(a, roles=["steward"]), world.user(b, roles=["steward"])
    a_jobs = [client.post("/v1/jobs", json={"kind": "consolidate"}, headers=sa.h).json()["id"] for _ in range(2)]
    b_job = client.post("/v1/jobs", json={"kind": "consolidate"}, headers=sb.h).json()["id"]
    orgs = [world.orgs[a], world.orgs[b]]
    first = claim(app.state.sessions, "w", 600, ["consolidate"], orgs)
    assert str(first.id) == a_jobs[0]
    with transaction(app.state.sessions) as db:  # the worker finishes A's job
        bind_principal(db, None, org_id=first.org_id, all_scopes=True)
        jobs_service.finish(db, jobs_service.get_for_update(db, first.org_id, first.id), stats={})
    assert str(claim(app.state.sessions, "w", 600, ["consolidate"], orgs).id) == b_job
