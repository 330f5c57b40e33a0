"""Per-key rate limits and request limits."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.helpers import count, ep


def test_rate_limit_is_per_key_and_changes_nothing(settings, embedder, world, admin_engine):
    from app.main import create_app

    app = create_app(settings.model_copy(update={"rate_limit_per_minute": 5}), embedder=embedder)
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    with TestClient(app) as c:
        codes = [c.post("/v1/episodes", json=ep(f"n{i}"), headers=alice.h).status_code for i in range(8)]
        assert codes[:5] == [201] * 5 and set(codes[5:]) == {429}
        r = c.post("/v1/episodes", json=ep("x"), headers=alice.h)
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
        assert c.post("/v1/episodes", json=ep("bob"), headers=bob.h).status_code == 201  # other key unaffected
    assert count(admin_engine, "episodes", alice.org_id) == 6


def test_query_and_k_limits(client, world):
    org = world.org()
    alice = world.user(org)
    assert client.post("/v1/search", json={"query": "x" * 2001}, headers=alice.h).status_code == 422
    assert client.post("/v1/search", json={"query": "x", "k": 101}, headers=alice.h).status_code == 422
    assert client.post("/v1/context", json={"query": "x", "budget_tokens": 10}, headers=alice.h).status_code == 422


def test_logs_carry_no_content_or_keys(client, world, caplog):
    org = world.org()
    alice = world.user(org)
    import logging

    with caplog.at_level(logging.DEBUG, logger="memscale"):
        client.post("/v1/episodes", json=ep("the launch code is swordfish-42"), headers=alice.h)
        client.post("/v1/search", json={"query": "swordfish launch code"}, headers=alice.h)
    text = "\n".join(r.getMessage() + str(r.__dict__) for r in caplog.records)
    from app.auth.principal import parse_key

    secret = parse_key(alice.key)[1]  # the secret may itself contain "_": split("_")[-1] was a random tail of it
    assert caplog.records and "swordfish" not in text and alice.key not in text and secret not in text


def test_released_hands_the_connection_back_and_rebinds_the_caller(client, world, app):
    """Endpoints embed with the pooled connection given back (app.kit.database.db.released); afterwards
    the transaction sees exactly what the caller may see again (RLS settings rebound)."""
    import pytest
    from sqlalchemy import text as sql

    from app.auth.principal import Principal
    from app.episodes.models import Episode
    from app.kit.database.db import bind_principal, released, transaction

    org = world.org()
    alice = world.user(org)
    client.post("/v1/episodes", json={"kind": "note", "content": "mine"}, headers=alice.h)
    me = Principal(alice.org_id, alice.user_id, alice.name, (), (), ())
    pool = app.state.sessions.kw["bind"].pool
    with transaction(app.state.sessions) as db:
        bind_principal(db, me)
        mine = sql("SELECT count(*) FROM episodes")
        assert db.execute(mine).scalar() == 1
        held = pool.checkedout()
        with released(db, me):
            assert pool.checkedout() == held - 1
        assert db.execute(mine).scalar() == 1  # RLS: still alice's view, not nothing, not everything
        db.add(Episode(org_id=me.org_id, owner_id=me.user_id, kind="note", content="pending"))
        with pytest.raises(RuntimeError, match="pending writes"):
            with released(db, me):
                pass
        db.rollback()


def test_rate_limit_in_postgres_holds_across_processes(settings, embedder, world, admin_engine):
    """Two API instances (what `serve --workers 2` runs, each with its own memory) share one
    key's budget when the buckets live in PostgreSQL; in memory each would grant it whole."""
    from app.main import create_app

    org = world.org()
    shared, alone = world.user(org), world.user(org)
    for backend, who, allowed in (("postgres", shared, 5), ("memory", alone, 10)):
        s = settings.model_copy(update={"rate_limit_per_minute": 5, "rate_limit_backend": backend})
        with TestClient(create_app(s, embedder=embedder)) as a, TestClient(create_app(s, embedder=embedder)) as b:
            codes = [
                (a if i % 2 else b).post("/v1/episodes", json=ep(f"{backend} {i}"), headers=who.h).status_code for i in range(12)
            ]
        assert codes.count(201) == allowed and set(codes) == {201, 429}, (backend, codes)
        limited = [i for i, c in enumerate(codes) if c == 429]
        assert limited == list(range(allowed, 12))  # refusals only once the budget is spent
    assert count(admin_engine, "episodes", shared.org_id) == 15
