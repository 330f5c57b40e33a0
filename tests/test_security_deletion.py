"""Issue 15 reproductions: deletion reaches what the deleter cannot see, and stored
Idempotency-Key replies do not outlive the data they hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from tests.helpers import ep


def _status(admin_engine, memory_id) -> str | None:
    with admin_engine.connect() as c:
        return c.execute(text("SELECT status FROM memories WHERE id = :i"), {"i": memory_id}).scalar()


def test_deleting_an_org_episode_reaches_private_memories_the_deleter_cannot_see(client, world, admin_engine):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    e = client.post("/v1/episodes", json=ep("the staging password rotates on Mondays", visibility="org"), headers=alice.h).json()[
        "id"
    ]
    other = client.post("/v1/episodes", json=ep("bob's own note about rotation", visibility="private"), headers=bob.h).json()[
        "id"
    ]
    only = [
        client.post(
            "/v1/memories",
            json={"text": f"staging password rotates weekly #{i}", "kind": "fact", "sources": [{"type": "episode", "id": e}]},
            headers=bob.h,
        ).json()
        for i in range(3)
    ]
    mixed = client.post(
        "/v1/memories",
        json={
            "text": "rotation happens on Mondays",
            "kind": "fact",
            "sources": [{"type": "episode", "id": e}, {"type": "episode", "id": other}],
        },
        headers=bob.h,
    ).json()
    # bob edits the mixed memory: the current version has no lineage edge of its own.
    patched = client.patch(f"/v1/memories/{mixed['id']}", json={"text": "rotation happens every Monday"}, headers=bob.h).json()
    assert patched["version"] == 2
    r = client.delete(f"/v1/episodes/{e}", headers=alice.h)
    assert r.status_code == 202
    job = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=alice.h).json()
    # alice may see none of bob's private memories: her job counts none of them (the audit log does).
    assert job["stats"]["memories_removed"] == 0 and job["stats"]["memories_quarantined"] == 0, job
    for m in only:
        assert _status(admin_engine, m["id"]) is None
        assert client.get(f"/v1/memories/{m['id']}", headers=bob.h).status_code == 404
    assert _status(admin_engine, patched["id"]) == "quarantined"
    ctx = client.post("/v1/context", json={"query": "staging password rotation Mondays"}, headers=bob.h).json()
    assert "rotat" not in " ".join(i["text"] for s in ctx["sections"] for i in s["items"] if i["type"] == "memory")
    # The audit event lists what it reached (ids), never content; alice learns only counts.
    with admin_engine.connect() as c:
        details = c.execute(
            text("SELECT details FROM audit_log WHERE action = 'episode.delete' AND target_id = :i"), {"i": e}
        ).scalar_one()
    assert set(details["removed_memory_ids"]) == {m["id"] for m in only}
    assert details["memories_removed"] == 3 and details["memories_quarantined"] == 1
    assert details["quarantined_memory_ids"] == [patched["id"]]
    assert "staging" not in str(details)


def test_steward_deletion_reaches_a_members_private_memory(client, world, admin_engine):
    org = world.org()
    steward, member = world.user(org, roles=["steward"]), world.user(org)
    e = client.post("/v1/episodes", json=ep("quarterly numbers are due on the 5th", visibility="org"), headers=member.h).json()[
        "id"
    ]
    m = client.post(
        "/v1/memories",
        json={"text": "numbers due on the 5th", "kind": "fact", "sources": [{"type": "episode", "id": e}]},
        headers=member.h,
    ).json()
    assert client.delete(f"/v1/episodes/{e}", headers=steward.h).status_code == 202
    assert _status(admin_engine, m["id"]) is None
    hits = client.post("/v1/search", json={"query": "numbers due"}, headers=member.h).json()["results"]
    assert all(h["id"] != m["id"] for h in hits)


def test_deleted_episode_cannot_be_replayed_through_its_idempotency_key(client, world, admin_engine):
    org = world.org()
    alice = world.user(org)
    body = ep("alice's salary is 123456")
    h = {**alice.h, "Idempotency-Key": "k-1"}
    first = client.post("/v1/episodes", json=body, headers=h).json()
    batch = client.post(
        "/v1/episodes/batch", json={"items": [ep("batch secret 998877")]}, headers={**alice.h, "Idempotency-Key": "k-2"}
    ).json()
    assert client.delete(f"/v1/episodes/{first['id']}", headers=alice.h).status_code == 202
    assert client.delete(f"/v1/episodes/{batch['ids'][0]}", headers=alice.h).status_code == 202
    with admin_engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM idempotency_keys WHERE user_id = :u"), {"u": alice.user_id}).scalar() == 0
    again = client.post("/v1/episodes", json=body, headers=h)
    assert again.status_code == 201 and again.json()["id"] != first["id"]  # made anew, not replayed


def test_forgetting_a_user_erases_their_stored_replies(client, world, admin_engine):
    org = world.org()
    alice, admin = world.user(org), world.user(org, roles=["admin"])
    body = ep("alice's medical leave starts in May")
    client.post("/v1/episodes", json=body, headers={**alice.h, "Idempotency-Key": "leave"})
    client.post("/v1/episodes/batch", json={"items": [ep("x")]}, headers={**alice.h, "Idempotency-Key": "b"})
    r = client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h)
    job = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=admin.h).json()
    assert job["stats"]["idempotency_replies_removed"] == 2, job
    with admin_engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM idempotency_keys WHERE user_id = :u"), {"u": alice.user_id}).scalar() == 0
        rows = c.execute(text("SELECT response::text FROM idempotency_keys WHERE org_id = :o"), {"o": alice.org_id}).all()
    assert all("medical" not in r[0] for r in rows)
    # A new key for the same user replaying the request gets a fresh episode, not the erased reply.
    from sqlalchemy.orm import Session

    from app.orgs import service
    from app.orgs.models import User

    with Session(admin_engine) as db:
        key = service.create_key(db, db.get(User, (alice.org_id, alice.user_id)))
        db.commit()
    again = client.post("/v1/episodes", json=body, headers={"Authorization": f"Bearer {key}", "Idempotency-Key": "leave"})
    assert again.status_code == 201
    with admin_engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM episodes WHERE id = :i"), {"i": again.json()["id"]}).scalar() == 1


def test_stored_replies_expire(client, world, admin_engine):
    org = world.org()
    alice = world.user(org)
    h = {**alice.h, "Idempotency-Key": "old"}
    first = client.post("/v1/episodes", json=ep("one"), headers=h).json()
    with admin_engine.begin() as c:
        c.execute(
            text("UPDATE idempotency_keys SET created_at = :t WHERE user_id = :u"),
            {"t": datetime.now(UTC) - timedelta(hours=25), "u": alice.user_id},
        )
    # Expired: the key is free again (another body is not a 409), and a new reply is stored.
    second = client.post("/v1/episodes", json=ep("two"), headers=h)
    assert second.status_code == 201 and second.json()["id"] != first["id"]
    # Any new reply purges the org's expired ones.
    with admin_engine.begin() as c:
        c.execute(
            text("UPDATE idempotency_keys SET created_at = :t WHERE user_id = :u"),
            {"t": datetime.now(UTC) - timedelta(hours=25), "u": alice.user_id},
        )
    client.post("/v1/episodes", json=ep("three"), headers={**alice.h, "Idempotency-Key": "new"})
    with admin_engine.connect() as c:
        keys = c.execute(text("SELECT key FROM idempotency_keys WHERE user_id = :u"), {"u": alice.user_id}).scalars().all()
    assert keys == ["new"]
