"""The re-embedding's switch copies the staged vectors before it takes the org's exclusive lock
(app/embedders/service.py): writes and searches of the org go on while the copy runs, what was
written meanwhile is embedded under the lock, and a writer that waits for a row the copy locked
makes the switch give way instead of a deadlock."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from sqlalchemy.orm import Session

from app.embedders import repository as repo
from app.embedders import service
from tests import test_reembed as reembed_tests
from tests import test_replicas as replicas_tests
from tests.test_reembed import E5, MINI, _back_to_minilm, _ids, bound, populate, stored

e5, models = reembed_tests.e5, reembed_tests.models  # the two models' fixtures, shared


def _org_staged(client, world, app, models, memory_text: str):
    """An org of four episodes and one memory, every row staged with e5's vectors: (its admin, the memory's id)."""
    org = world.org()
    admin = world.user(org, roles=["admin"])
    populate(client, admin, episodes=4)
    m = client.post("/v1/memories", json={"text": memory_text, "kind": "fact"}, headers=admin.h)
    assert m.status_code == 201, m.text
    _stage_all(app, admin.org_id, models.by[E5])
    return admin, m.json()["id"]


def _until(cond, beside, never: str) -> None:
    """Wait (60 s at most) for `cond`, while the request running `beside` is still waiting."""
    deadline = time.monotonic() + 60
    while not cond():
        assert time.monotonic() < deadline, never
        assert beside.thread.is_alive(), beside.out
        time.sleep(0.05)


def _stage_all(app, org_id, new) -> None:
    with bound(app, org_id) as db:
        service.begin(db, org_id, E5, 384, None)
        db.commit()
    cursor: dict = {}
    while cursor.get("item") != "end":
        with bound(app, org_id) as db:
            service.stage_batch(db, org_id, new, cursor, limit=64)
            db.commit()


class Beside:
    """A request run in another thread while the switch's transaction is open."""

    def __init__(self, fn):
        self.out, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn):
        try:
            self.out = fn()
        except BaseException as e:  # reported by the test, not lost in the thread
            self.error = e

    def done_within(self, seconds: float) -> bool:
        self.thread.join(seconds)
        return not self.thread.is_alive()


def test_a_write_during_the_copy_completes_and_is_embedded_again_under_the_lock(client, world, app, admin_engine, models):
    org = world.org()
    admin = world.user(org, roles=["admin"])
    populate(client, admin, episodes=6)
    before = stored(admin_engine, admin.org_id)
    _stage_all(app, admin.org_id, models.by[E5])

    seen: dict = {}

    def during_copy():
        # The copy holds its row locks, not the org's lock: another row's write and a search
        # complete now, and the search still ranks the old vectors.
        write = Beside(
            lambda: client.post(
                "/v1/episodes", json={"kind": "note", "content": "kafka lag written during the copy"}, headers=admin.h
            )
        )
        assert write.done_within(60), "a write waited for the switch's copy"
        assert write.error is None and write.out.status_code == 201, write.out.text
        seen["id"] = write.out.json()["id"]
        search = Beside(lambda: _ids(client, admin.h, "kafka lag"))
        assert search.done_within(60) and search.error is None, search.error
        rows = stored(admin_engine, admin.org_id)
        seen["models"] = models.models(rows)

    with bound(app, admin.org_id) as db:
        stats = service.switch(db, admin.org_id, models.by[E5], after_copy=during_copy)
        db.commit()
    assert seen["models"] == {MINI}  # the copy was invisible to others until the commit
    after = stored(admin_engine, admin.org_id)
    assert ("episode", seen["id"]) in after
    for text, v in after.values():  # the write during the copy too: no row left in the old model
        assert float(np.dot(v, models.vec(E5, text))) > 0.999, text
    assert stats["switched"] is True
    assert stats["copied_before_lock"] == len(before)  # the bulk copy ran before the lock
    assert stats["caught_up_under_lock"] >= 1  # the episode written during the copy (and its new words)
    assert stats["copied_under_lock"] == stats["caught_up_under_lock"]  # under the lock: only those
    with Session(admin_engine) as db:
        assert db.query(repo.StagedVector).filter_by(org_id=admin.org_id).count() == 0
        assert repo.run_of(db, admin.org_id) is None
    assert client.get("/v1/orgs/current/embedder", headers=admin.h).json()["model"] == E5
    _back_to_minilm_in(app, admin.org_id, models.by[MINI])


def _back_to_minilm_in(app, org_id, mini) -> None:
    """Later apps of this test database start only when every org holds the configured model."""
    with bound(app, org_id) as db:
        service.begin(db, org_id, MINI, 384, None)
        db.commit()
    with bound(app, org_id) as db:
        assert service.switch(db, org_id, mini, online=False)["switched"] is True
        db.commit()


def test_a_writer_waiting_for_a_row_the_copy_locked_makes_the_switch_give_way(client, world, app, admin_engine, models, run_job):
    admin, mem = _org_staged(client, world, app, models, "invoices go out on the first")
    state: dict = {}

    def during_copy():
        # A memory update holds the org's lock in share mode (it embedded its text) and waits for
        # the version row the copy locked: the switch must not wait for the lock exclusive now.
        state["patch"] = Beside(
            lambda: client.patch(f"/v1/memories/{mem}", json={"text": "invoices go out on the second"}, headers=admin.h)
        )
        waits = lambda: repo.share_holder_waits_for_us(db, admin.org_id)  # noqa: E731
        _until(waits, state["patch"], "the update never waited for the copy's row")

    with bound(app, admin.org_id) as db:
        with pytest.raises(service.SwitchBusy, match="writer waits for a row"):
            service.switch(db, admin.org_id, models.by[E5], after_copy=during_copy)
        db.rollback()
    patch = state["patch"]
    assert patch.done_within(60) and patch.error is None, patch.error
    assert patch.out.status_code == 200, patch.out.text  # not a deadlock's victim
    assert models.models(stored(admin_engine, admin.org_id)) == {MINI}  # nothing switched half

    job = run_job(admin.org_id, "reembed", {"model": E5}, created_by=admin.user_id)
    assert job.status == "succeeded", job.error
    assert job.stats["switched"] is True and job.stats["switch_tries"] == 1
    after = stored(admin_engine, admin.org_id)
    assert ("memory", patch.out.json()["id"]) in after
    for text, v in after.values():
        assert float(np.dot(v, models.vec(E5, text))) > 0.999, text
    _back_to_minilm(run_job, admin.org_id)
    assert models.models(stored(admin_engine, admin.org_id)) == {MINI}


# The real streaming standby of tests/test_replicas.py, one for this module.
standby, rapp, rclient = replicas_tests.standby, replicas_tests.rapp, replicas_tests.rclient
_su, _wait = replicas_tests._su, replicas_tests._wait


def test_a_standby_that_has_not_replayed_the_switch_sends_the_search_to_the_primary(rapp, rclient, standby, world, run_job):
    from sqlalchemy import text

    org = world.org()
    admin = world.user(org, roles=["admin"])
    items = [{"kind": "note", "content": t, "visibility": "org"} for t in ["kafka lag paged the oncall", "invoices on the first"]]
    w = rclient.post("/v1/episodes/batch", json={"items": items}, headers=admin.h)
    assert w.status_code == 201, w.text
    reps = rapp.state.replicas
    token = {**admin.h, "Memscale-LSN": w.headers["Memscale-LSN"]}
    assert rclient.post("/v1/search", json={"query": "kafka lag", "k": 5}, headers=token).status_code == 200
    su = _su(standby)
    try:
        with su.connect() as c:
            c.execute(text("SELECT pg_wal_replay_pause()"))
        job = run_job(admin.org_id, "reembed", {"model": E5}, created_by=admin.user_id)  # on the primary only
        assert job.status == "succeeded" and job.stats["switched"] is True, job.error
        st = dict(reps.stats)
        # The primary says e5 (the question is embedded with e5); the standby still holds MiniLM
        # vectors: ranking there would pair them. The read goes to the primary.
        r = rclient.post("/v1/search", json={"query": "kafka lag", "k": 5}, headers=admin.h)
        assert r.status_code == 200, r.text
        assert reps.stats["stale_skips"] == st["stale_skips"] + 1
        assert reps.stats["replica_reads"] == st["replica_reads"] and reps.stats["primary_reads"] == st["primary_reads"] + 1
        assert r.json()["results"] and r.json()["results"][0]["id"] == w.json()["ids"][0]
    finally:
        with su.connect() as c:
            c.execute(text("SELECT pg_wal_replay_resume()"))
        su.dispose()
    _wait(lambda: reps.replicas[0].healthy, 30, "the standby to catch up")
    st = dict(reps.stats)
    _wait(
        lambda: (
            rclient.post("/v1/search", json={"query": "kafka lag", "k": 5}, headers=admin.h).status_code == 200
            and reps.stats["replica_reads"] > st["replica_reads"]
        ),
        30,
        "the standby to serve the org again once it replayed the switch",
    )
    _back_to_minilm(run_job, admin.org_id)


def test_a_delete_of_a_row_the_copy_locked_waits_for_the_switch_without_a_deadlock(
    client, world, app, admin_engine, models, run_job
):
    from sqlalchemy import text

    admin, mem = _org_staged(client, world, app, models, "the vendor rollback runbook")
    state: dict = {}

    def during_copy():
        state["delete"] = Beside(lambda: client.delete(f"/v1/memories/{mem}", headers=admin.h))
        me = db.execute(text("SELECT pg_backend_pid()")).scalar()
        waits = text("SELECT count(*) FROM pg_locks WHERE NOT granted AND CAST(:me AS int) = ANY (pg_blocking_pids(pid))")
        with admin_engine.connect() as c:
            _until(lambda: c.execute(waits, {"me": me}).scalar(), state["delete"], "the delete never waited for the copy's row")

    with bound(app, admin.org_id) as db:
        try:  # the delete waits for the switch's commit, or the switch gives way to it
            switched = service.switch(db, admin.org_id, models.by[E5], after_copy=during_copy)["switched"]
            db.commit()
        except service.SwitchBusy:
            db.rollback()
            switched = False
    d = state["delete"]
    assert d.done_within(60) and d.error is None, d.error
    assert d.out.status_code == 204, d.out.text  # not a deadlock's victim
    if not switched:
        job = run_job(admin.org_id, "reembed", {"model": E5}, created_by=admin.user_id)
        assert job.status == "succeeded", job.error
    after = stored(admin_engine, admin.org_id)
    assert ("memory", mem) not in after
    for text_, v in after.values():
        assert float(np.dot(v, models.vec(E5, text_))) > 0.999, text_
    with Session(admin_engine) as s:
        assert s.query(repo.StagedVector).filter_by(org_id=admin.org_id).count() == 0
    _back_to_minilm(run_job, admin.org_id)


def test_the_switch_queues_for_the_lock_in_short_waits_and_gives_way_when_it_stays_held(app, world):
    from sqlalchemy import text

    org = world.org()
    admin = world.user(org, roles=["admin"])
    with bound(app, admin.org_id) as reader:
        repo.lock_shared(reader, admin.org_id)  # a ranking that does not end
        with bound(app, admin.org_id) as db:
            before = db.execute(text("SELECT current_setting('lock_timeout')")).scalar()
            with pytest.raises(service.SwitchBusy, match="stayed held"):
                service._lock_giving_way(db, admin.org_id, 0.2)
            # the timed-out waits were savepoints: the transaction and its settings are intact
            assert db.execute(text("SELECT current_setting('lock_timeout')")).scalar() == before
            db.rollback()
        reader.rollback()
    with bound(app, admin.org_id) as db:
        service._lock_giving_way(db, admin.org_id, 0.2)  # free: taken at once
        with bound(app, admin.org_id) as other:
            assert not other.execute(
                text("SELECT pg_try_advisory_xact_lock_shared(hashtextextended(:k, 13))"), {"k": f"embedder:{admin.org_id}"}
            ).scalar()
            other.rollback()
        db.rollback()


def test_the_job_tries_the_switch_again_after_giving_way_to_a_writer(client, world, app, admin_engine, models, run_job):
    from sqlalchemy import text

    org = world.org()
    admin = world.user(org, roles=["admin"])
    populate(client, admin, episodes=4)
    m = client.post("/v1/memories", json={"text": "billing runs on the first", "kind": "fact"}, headers=admin.h)
    assert m.status_code == 201, m.text
    # The switch's copy writes the tables in turn, the vocabulary last: once a transaction holds
    # the vocabulary's row-exclusive lock, the memory rows are copied and locked.
    copying = text(
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
        " WHERE c.relname = 'lexicon' AND l.mode = 'RowExclusiveLock' AND l.granted"
    )
    with bound(app, admin.org_id) as writer:
        repo.lock_shared(writer, admin.org_id)  # a writer's transaction, holding the org's lock in share mode
        job = Beside(lambda: run_job(admin.org_id, "reembed", {"model": E5}, created_by=admin.user_id))
        deadline = time.monotonic() + 120
        with admin_engine.connect() as c:
            while not c.execute(copying).scalar():
                assert time.monotonic() < deadline and job.thread.is_alive(), (job.error, job.out)
                time.sleep(0.05)
        # The writer now needs a row the copy locked: it waits, holding the share lock.
        got = writer.execute(
            text("SELECT id FROM memories WHERE org_id = :o AND id = :m FOR UPDATE"), {"o": admin.org_id, "m": m.json()["id"]}
        ).all()
        assert len(got) == 1
        writer.commit()
    assert job.done_within(120) and job.error is None, job.error
    assert job.out.status == "succeeded", job.out.error
    assert job.out.stats["switched"] is True and job.out.stats["switch_tries"] == 2  # gave way once, then switched
    for text_, v in stored(admin_engine, admin.org_id).values():
        assert float(np.dot(v, models.vec(E5, text_))) > 0.999, text_
    _back_to_minilm(run_job, admin.org_id)
