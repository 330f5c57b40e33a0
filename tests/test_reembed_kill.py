"""`memscale admin reembed` killed with SIGKILL at random points and run again: nothing is lost,
the run goes on from what was staged, and at every observation all of the org's vectors are of
one model (never a ranking over two)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.embedders.models import StagedVector
from tests.test_reembed import E5, MINI, Models, sentences, stored


@pytest.fixture(scope="module")
def e5():
    from app.kit.runtime.embedding import E5Embedder

    return E5Embedder()


def _staged(engine, org_id) -> int:
    with Session(engine) as db:
        return db.execute(select(func.count()).where(StagedVector.org_id == org_id)).scalar_one()


def test_kill_9_at_random_points_loses_nothing_and_never_mixes_models(
    settings, client, world, admin_engine, embedder, e5, run_job
):
    org = world.org()
    admin = world.user(org, roles=["admin"])
    items = [{"kind": "note", "content": t, "visibility": "org"} for t in sentences(24, seed=7)]
    assert client.post("/v1/episodes/batch", json={"items": items}, headers=admin.h).status_code == 201
    rows = stored(admin_engine, admin.org_id)
    models = Models(embedder, e5)
    models.warm([t for t, _ in rows.values()])
    assert models.models(rows) == {MINI}

    env = {**os.environ, "MEMSCALE_DATABASE_URL": settings.database_url}
    cmd = [sys.executable, "-m", "app", "admin", "reembed", "--org", org, "--model", E5]
    rng = random.Random(int(os.environ.get("REEMBED_KILL_SEED", "44")))
    seen: list[set[str]] = []
    staged_at_kill = []
    for attempt in range(3):
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # The first kill lands once a batch is staged (mid-run for sure); the others at random.
        wait = None if attempt == 0 else rng.uniform(0.5, 6.0)
        start = time.monotonic()
        while p.poll() is None:
            seen.append(models.models(stored(admin_engine, admin.org_id)))
            if (wait is None and _staged(admin_engine, admin.org_id) > 0) or (
                wait is not None and time.monotonic() - start > wait
            ):
                break
            time.sleep(0.1)
        p.send_signal(signal.SIGKILL)
        p.wait()
        staged_at_kill.append(_staged(admin_engine, admin.org_id))
    assert 0 < staged_at_kill[0] < len(rows)  # killed mid-run
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert all(len(s) == 1 for s in seen), seen  # one model at every observation
    after = stored(admin_engine, admin.org_id)
    assert set(after) == set(rows)  # nothing lost
    assert models.models(after) == {E5}
    assert _staged(admin_engine, admin.org_id) == 0
    job = run_job(admin.org_id, "reembed", {"model": MINI})  # later apps of this database start on MiniLM
    assert job.status == "succeeded", job.error
    assert models.models(stored(admin_engine, admin.org_id)) == {MINI}
