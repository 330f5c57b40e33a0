"""401/403/409/413/422: clear errors in the the REST contract shape, and nothing changes."""

from __future__ import annotations

import pytest

from tests.helpers import count, ep


def _assert_error(r, status: int, code: str | None = None):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    if code:
        assert body["error"]["code"] == code


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer nope"},
        {"Authorization": "Basic abc"},
        {"Authorization": "Bearer msk_" + "0" * 32 + "_forged"},
    ],
)
def test_401_changes_nothing(client, world, admin_engine, headers):
    org = world.org()
    world.user(org)
    before = count(admin_engine, "episodes", world.orgs[org])
    r = client.post("/v1/episodes", json=ep(), headers=headers)
    _assert_error(r, 401)
    assert count(admin_engine, "episodes", world.orgs[org]) == before


def test_tampered_key_secret_is_rejected(client, world):
    org = world.org()
    alice = world.user(org)
    forged = alice.key[:-4] + ("AAAA" if not alice.key.endswith("AAAA") else "BBBB")
    _assert_error(
        client.get("/v1/jobs/00000000-0000-0000-0000-000000000000", headers={"Authorization": f"Bearer {forged}"}),
        401,
        "invalid_key",
    )


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "diary", "content": "x"},
        {"kind": "note", "content": ""},
        {"kind": "note"},
        {"kind": "note", "content": "x", "visibility": "public"},
        {"kind": "note", "content": "x", "visibility": "group"},
        {"kind": "note", "content": "x", "labels": ["has space"]},
        {"kind": "note", "content": "x", "unknown_field": 1},
        {"kind": "note", "content": "x", "outcome": "maybe"},
    ],
)
def test_422_changes_nothing(client, world, admin_engine, body):
    org = world.org()
    alice = world.user(org)
    r = client.post("/v1/episodes", json=body, headers=alice.h)
    _assert_error(r, 422, "validation_error")
    assert count(admin_engine, "episodes", alice.org_id) == 0


def test_batch_is_all_or_nothing(client, world, admin_engine):
    org = world.org()
    alice = world.user(org)
    bad = {"items": [ep("one"), ep("two"), {"kind": "note", "content": ""}]}
    _assert_error(client.post("/v1/episodes/batch", json=bad, headers=alice.h), 422)
    assert count(admin_engine, "episodes", alice.org_id) == 0
    ok = client.post("/v1/episodes/batch", json={"items": [ep(f"item {i}") for i in range(5)]}, headers=alice.h)
    assert ok.status_code == 201 and len(ok.json()["ids"]) == 5
    assert count(admin_engine, "episodes", alice.org_id) == 5


def test_batch_over_limit_is_413(client, world, admin_engine, app):
    org = world.org()
    alice = world.user(org)
    n = app.state.settings.max_batch_items + 1
    r = client.post("/v1/episodes/batch", json={"items": [ep("x")] * n}, headers=alice.h)
    _assert_error(r, 413, "batch_too_large")
    assert count(admin_engine, "episodes", alice.org_id) == 0


def test_body_too_large_is_413(client, world, admin_engine, app):
    org = world.org()
    alice = world.user(org)
    big = "x" * (app.state.settings.max_body_bytes + 10)
    r = client.post(
        "/v1/episodes",
        content=f'{{"kind":"note","content":"{big}"}}'.encode(),
        headers={**alice.h, "content-type": "application/json"},
    )
    _assert_error(r, 413, "payload_too_large")
    assert count(admin_engine, "episodes", alice.org_id) == 0


def test_idempotency_key(client, world, admin_engine):
    org = world.org()
    alice = world.user(org)
    h = {**alice.h, "Idempotency-Key": "req-1"}
    a = client.post("/v1/episodes", json=ep("first"), headers=h)
    b = client.post("/v1/episodes", json=ep("first"), headers=h)
    assert a.status_code == b.status_code == 201
    assert a.json()["id"] == b.json()["id"]
    assert count(admin_engine, "episodes", alice.org_id) == 1
    c = client.post("/v1/episodes", json=ep("different"), headers=h)
    _assert_error(c, 409, "idempotency_key_reused")
    assert count(admin_engine, "episodes", alice.org_id) == 1
    # Keys are per user: bob may use the same key string.
    bob = world.user(org)
    d = client.post("/v1/episodes", json=ep("first"), headers={**bob.h, "Idempotency-Key": "req-1"})
    assert d.status_code == 201 and d.json()["id"] != a.json()["id"]


def test_idempotent_batch(client, world, admin_engine):
    org = world.org()
    alice = world.user(org)
    h = {**alice.h, "Idempotency-Key": "batch-1"}
    body = {"items": [ep("a"), ep("b")]}
    a = client.post("/v1/episodes/batch", json=body, headers=h)
    b = client.post("/v1/episodes/batch", json=body, headers=h)
    assert a.json() == b.json()
    assert count(admin_engine, "episodes", alice.org_id) == 2


def test_auditor_may_not_write(client, world, admin_engine):
    org = world.org()
    aud = world.user(org, roles=["auditor"])
    _assert_error(client.post("/v1/episodes", json=ep(), headers=aud.h), 403, "forbidden")
    assert count(admin_engine, "episodes", aud.org_id) == 0


def test_unknown_route_and_bad_uuid_use_error_shape(client, world):
    org = world.org()
    alice = world.user(org)
    _assert_error(client.get("/v1/episodes/not-a-uuid", headers=alice.h), 422)
    _assert_error(client.get("/v1/nothing-here", headers=alice.h), 404)
