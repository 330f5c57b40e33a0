"""Read replicas against a REAL streaming standby: `pg_basebackup -R` from the embedded primary,
started from the bundled binaries as the same unprivileged user, with its own socket folder under
a temporary folder (never a mock). The standby is stopped and removed even when a test fails.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.conftest import episode


@pytest.fixture(scope="module")
def standby(settings):
    """One streaming standby of the test server for this module (after the test database exists,
    so the copy holds it and later writes stream in). Its data dir is a folder of its own under
    /tmp, not pytest's: every pytest session that starts (another checkout's suite) takes the
    search bit off /tmp/pytest-of-<user> again, after which the server's user can no longer reach
    a data dir below it (pg_ctl stop/start fail with 'Permission denied')."""
    import os
    import tempfile

    from app.kit.database.pg import embedded

    if os.environ.get("MEMSCALE_TEST_DATABASE_URL"):
        pytest.skip("needs the embedded server (pg_basebackup over its socket)")
    primary = embedded(settings)
    base = Path(tempfile.mkdtemp(prefix="msrep", dir="/tmp"))
    rep = primary.standby(base / "pg")
    try:
        rep.start()
        yield rep
    finally:
        rep.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


def _replica_url(settings, rep) -> str:
    from app.kit.database.pg import app_url

    return make_url(app_url(settings)).update_query_dict({"host": str(rep.socket_dir)}).render_as_string(hide_password=False)


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def rapp(settings, embedder, standby):
    from app.main import create_app

    s = settings.model_copy(
        update={
            "read_replica_urls": _replica_url(settings, standby),
            "replica_check_interval_s": 0.1,
            "replica_backoff_max_s": 1.0,
        }
    )
    return create_app(s, embedder=embedder)


@pytest.fixture(scope="module")
def rclient(rapp):
    from fastapi.testclient import TestClient

    with TestClient(rapp, raise_server_exceptions=False) as c:
        _wait(lambda: rapp.state.replicas.replicas[0].healthy, 30, "the standby to be probed healthy")
        yield c


def _su(rep):
    """A superuser connection to the standby (replay pause/resume)."""
    return create_engine(rep.url, isolation_level="AUTOCOMMIT")


def test_standby_is_a_real_streaming_replica_with_rls(settings, standby, world):
    """The standby is in recovery, streams from the primary, and the app role's row-level security
    holds there exactly as on the primary: nothing without bound settings, own rows with them."""
    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal

    org = world.org()
    a, b = world.user(org), world.user(org)
    eng = _su(standby)
    with eng.connect() as c:
        assert c.execute(text("SELECT pg_is_in_recovery()")).scalar() is True
    app_eng = create_engine(_replica_url(settings, standby))
    try:
        from sqlalchemy.orm import Session

        _wait(lambda: _count_users(app_eng, b), 10, "the new users to replay")
        p = Principal(org_id=a.org_id, user_id=a.user_id, name=a.name, roles=(), groups=(), clearances=())
        with Session(app_eng) as db:
            assert db.execute(text("SELECT count(*) FROM users")).scalar() == 0  # no settings: nothing
            bind_principal(db, p)
            ids = {r[0] for r in db.execute(text("SELECT id FROM users"))}
            assert a.user_id in ids and b.user_id in ids
            db.execute(text("SELECT set_config('memscale.org_id', :o, true)"), {"o": str(uuid.uuid4())})
            assert db.execute(text("SELECT count(*) FROM users")).scalar() == 0  # another org: nothing
    finally:
        app_eng.dispose()
        eng.dispose()


def _count_users(eng, actor) -> bool:
    from sqlalchemy.orm import Session

    from app.kit.database.db import bind_principal

    with Session(eng) as db:
        bind_principal(db, None, org_id=actor.org_id)
        return bool(db.execute(text("SELECT count(*) FROM users WHERE id = :u"), {"u": actor.user_id}).scalar())


def test_reads_on_replica_writes_carry_lsn_and_nothing_leaks(rapp, rclient, world):
    org, other_org = world.org(), world.org()
    a, b, x = world.user(org), world.user(org), world.user(other_org)
    r = rclient.post("/v1/episodes", json=episode("replica canary: the kiln runs at 1240 degrees"), headers=a.h)
    assert r.status_code == 201, r.text
    lsn = r.headers["Memscale-LSN"]
    eid = r.json()["id"]
    m = rclient.post("/v1/memories", json={"text": "kiln temperature is 1240", "kind": "fact"}, headers=a.h)
    assert m.status_code == 201 and m.headers["Memscale-LSN"]
    lsn = m.headers["Memscale-LSN"]
    st = rapp.state.replicas.stats
    before = st["replica_reads"]
    h = {**a.h, "Memscale-LSN": lsn}
    s = rclient.post("/v1/search", json={"query": "kiln degrees"}, headers=h)
    assert s.status_code == 200 and eid in [x["id"] for x in s.json()["results"]]
    assert rclient.get(f"/v1/episodes/{eid}", headers=h).status_code == 200
    assert rclient.get(f"/v1/memories/{m.json()['id']}", headers=h).status_code == 200
    assert rclient.get(f"/v1/lineage/episode/{eid}", headers=h).status_code == 200
    c = rclient.post("/v1/context", json={"query": "kiln temperature"}, headers=h)
    assert c.status_code == 200 and "1240" in c.json()["text"]
    assert st["replica_reads"] - before == 5  # all five reads served by the standby
    # A read that writes a retrieval event gets an LSN too (the event is on the primary).
    assert s.headers.get("Memscale-LSN")
    # Private to a: not for b (same org) nor x (other org), on the replica too.
    for who in (b, x):
        hh = {**who.h, "Memscale-LSN": lsn}
        res = rclient.post("/v1/search", json={"query": "kiln degrees"}, headers=hh)
        assert res.status_code == 200 and eid not in [i["id"] for i in res.json()["results"]]
        assert rclient.get(f"/v1/episodes/{eid}", headers=hh).status_code == 404
        assert rclient.get(f"/v1/lineage/episode/{eid}", headers=hh).status_code == 404
        ctx = rclient.post("/v1/context", json={"query": "kiln temperature"}, headers=hh)
        assert ctx.status_code == 200 and "1240" not in ctx.json()["text"]
    # A malformed token is a clear 400, not ignored.
    bad = rclient.post("/v1/search", json={"query": "kiln"}, headers={**a.h, "Memscale-LSN": "yesterday"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_lsn"


def test_standby_lost_right_after_a_read_keeps_the_answer(rapp, rclient, standby, world):
    """The standby connection dies after the read finished, before the session is closed (its
    ROLLBACK then fails): the answer read there stands, nothing is raised (a 503 before), the
    connection is dropped and the standby marked down until the probe brings it back."""
    from app.auth.principal import Principal

    org = world.org()
    a = world.user(org)
    p = Principal(org_id=a.org_id, user_id=a.user_id, name=a.name, roles=(), groups=(), clearances=())
    reps = rapp.state.replicas
    _wait(lambda: reps.replicas[0].healthy, 30, "the standby to be healthy")
    su = _su(standby)
    calls: list[str] = []

    def read_then_lose_connection(rdb) -> str:
        in_recovery, pid = rdb.execute(text("SELECT pg_is_in_recovery(), pg_backend_pid()")).one()
        calls.append("standby" if in_recovery else "primary")
        if in_recovery:
            with su.connect() as c:
                assert c.execute(text("SELECT pg_terminate_backend(:p, 5000)"), {"p": pid}).scalar()
        return "the answer"

    try:
        with rapp.state.sessions() as primary_db:
            assert reps.run(p, primary_db, read_then_lose_connection, None) == "the answer"
        assert calls == ["standby"]  # read once, on the standby; not re-run on the primary
        assert not reps.replicas[0].healthy and "connection lost" in reps.replicas[0].reason
        _wait(lambda: reps.replicas[0].healthy, 30, "the probe to bring the standby back")
    finally:
        su.dispose()


def test_paused_replay_lsn_read_goes_to_primary_then_lag_skips_replica(rapp, rclient, standby, world):
    """Replay paused on the standby: a read with a fresh token waits briefly, then the primary
    serves it (never a miss); once the standby is more than the bound behind, it is skipped."""
    org = world.org()
    a = world.user(org)
    reps = rapp.state.replicas
    _wait(lambda: reps.replicas[0].healthy, 30, "the standby to be healthy")
    su = _su(standby)
    old_bound = reps.max_lag
    try:
        with su.connect() as c:
            c.execute(text("SELECT pg_wal_replay_pause()"))
        r = rclient.post("/v1/episodes", json=episode("paused canary: glaze batch 77 cracked"), headers=a.h)
        assert r.status_code == 201
        st = dict(reps.stats)
        got = rclient.get(f"/v1/episodes/{r.json()['id']}", headers={**a.h, "Memscale-LSN": r.headers["Memscale-LSN"]})
        assert got.status_code == 200 and "glaze batch 77" in got.json()["content"]
        assert reps.stats["primary_reads"] == st["primary_reads"] + 1 and reps.stats["lsn_waits"] > st["lsn_waits"]
        # Without a token the standby may serve a stale state: it does not have the episode yet.
        stale = rclient.get(f"/v1/episodes/{r.json()['id']}", headers=a.h)
        assert stale.status_code == 404
        reps.max_lag = 1  # every byte behind counts as lagging now
        rclient.post("/v1/episodes", json=episode("more wal"), headers=a.h)
        _wait(lambda: not reps.replicas[0].healthy, 10, "the lagging standby to be skipped")
        assert "lagging" in reps.replicas[0].reason
        got = rclient.get(f"/v1/episodes/{r.json()['id']}", headers=a.h)  # no token, but the primary serves
        assert got.status_code == 200
    finally:
        reps.max_lag = old_bound
        with su.connect() as c:
            c.execute(text("SELECT pg_wal_replay_resume()"))
        su.dispose()
    _wait(lambda: reps.replicas[0].healthy, 30, "the standby to catch up and come back")


def _serve(app):
    import socket

    import uvicorn

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    _wait(lambda: server.started, 60, "uvicorn to start")
    return f"http://127.0.0.1:{port}", server, th


def test_replica_stopped_and_restarted_under_load(settings, embedder, standby, world):
    """Writers (each write then read back with its LSN token) and searchers run while the
    standby is stopped (immediate: connections cut mid-query) and started again: 0 failed
    requests, every read-after-write sees its write, and reads return to the standby after."""
    from app.main import create_app

    org = world.org()
    actors = [world.user(org) for _ in range(3)]
    s = settings.model_copy(
        update={
            "read_replica_urls": _replica_url(settings, standby),
            "replica_check_interval_s": 0.1,
            "replica_backoff_max_s": 1.0,
        }
    )
    app = create_app(s, embedder=embedder)
    base, server, th = _serve(app)
    reps = app.state.replicas
    failures: list = []
    misses: list = []
    done = {"writes": 0, "reads": 0}
    stop = threading.Event()

    def writer(actor) -> None:
        with httpx.Client(base_url=base, headers=actor.h, timeout=60) as c:
            i = 0
            while not stop.is_set():
                i += 1
                word = f"w{uuid.uuid4().hex[:10]}"
                r = c.post("/v1/episodes", json=episode(f"load note {word} number {i}"))
                if r.status_code != 201:
                    failures.append(("write", r.status_code, r.text[:200]))
                    continue
                h = {"Memscale-LSN": r.headers["Memscale-LSN"]}
                g = c.get(f"/v1/episodes/{r.json()['id']}", headers=h)
                q = c.post("/v1/search", json={"query": word, "mode": "text"}, headers=h)
                for name, resp in (("get", g), ("search", q)):
                    if resp.status_code != 200:
                        failures.append((name, resp.status_code, resp.text[:200]))
                if g.status_code == 200 and g.json()["id"] != r.json()["id"]:
                    misses.append(("get", word))
                if q.status_code == 200 and r.json()["id"] not in [x["id"] for x in q.json()["results"]]:
                    misses.append(("search", word))
                done["writes"] += 1

    def reader(actor) -> None:
        with httpx.Client(base_url=base, headers=actor.h, timeout=60) as c:
            while not stop.is_set():
                r = c.post("/v1/search", json={"query": "load note number", "k": 5})
                if r.status_code != 200:
                    failures.append(("read", r.status_code, r.text[:200]))
                done["reads"] += 1

    threads = [
        threading.Thread(target=writer, args=(actors[0],)),
        threading.Thread(target=writer, args=(actors[1],)),
        threading.Thread(target=reader, args=(actors[2],)),
        threading.Thread(target=reader, args=(actors[2],)),
    ]
    try:
        _wait(lambda: reps.replicas[0].healthy, 30, "the standby to be healthy")
        for t in threads:
            t.start()
        # Writes too before the outage (searches alone can reach 20 first when they are fast).
        _wait(lambda: reps.stats["replica_reads"] >= 20 and done["writes"] >= 5, 120, "reads on the standby under load")
        standby.stop("immediate")
        at_stop = dict(done)
        _wait(
            lambda: done["writes"] >= at_stop["writes"] + 5 and done["reads"] >= at_stop["reads"] + 10,
            120,
            "traffic while the standby is down",
        )
        assert not reps.replicas[0].healthy
        standby.start()
        _wait(lambda: reps.replicas[0].healthy, 60, "the standby back in use")
        served = reps.stats["replica_reads"]
        _wait(lambda: reps.stats["replica_reads"] >= served + 10, 60, "reads on the standby again")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        server.should_exit = True
        th.join(timeout=30)
        if not standby.running():
            standby.start()
    assert done["writes"] >= 10 and done["reads"] >= 20
    assert failures == [], failures[:5]
    assert misses == [], misses[:5]
    assert reps.stats["fallbacks"] + reps.stats["primary_reads"] > 0  # the primary covered the outage
