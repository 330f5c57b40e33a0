from __future__ import annotations

from sqlalchemy import text

from tests.helpers import ep


def test_patch_creates_a_version_and_keeps_the_old(client, world):
    org = world.org()
    alice = world.user(org)
    m1 = client.post("/v1/memories", json={"text": "deploys happen on tuesdays", "kind": "rule"}, headers=alice.h).json()
    assert (m1["version"], m1["status"]) == (1, "active")
    r = client.patch(f"/v1/memories/{m1['id']}", json={"text": "deploys happen on thursdays"}, headers=alice.h)
    assert r.status_code == 200, r.text
    m2 = r.json()
    assert m2["id"] != m1["id"] and m2["root_id"] == m1["root_id"] and m2["version"] == 2
    old = client.get(f"/v1/memories/{m1['id']}", headers=alice.h).json()
    assert old["status"] == "superseded" and old["superseded_at"] and old["valid_to"]
    assert old["text"] == "deploys happen on tuesdays"
    # The superseded version can no longer be patched; only the current one.
    assert client.patch(f"/v1/memories/{m1['id']}", json={"text": "x"}, headers=alice.h).status_code == 409
    # Search returns only the active version.
    ids = {
        x["id"]
        for x in client.post("/v1/search", json={"query": "deploys happen", "types": ["memory"]}, headers=alice.h).json()[
            "results"
        ]
    }
    assert m2["id"] in ids and m1["id"] not in ids


def test_patch_may_not_widen_scope(client, world):
    org = world.org()
    alice = world.user(org)
    m = client.post("/v1/memories", json={"text": "t", "kind": "fact", "labels": ["pii"]}, headers=alice.h).json()
    r = client.patch(f"/v1/memories/{m['id']}", json={"visibility": "org", "labels": []}, headers=alice.h)
    assert r.status_code == 422
    assert client.get(f"/v1/memories/{m['id']}", headers=alice.h).json()["status"] == "active"


def test_member_cannot_change_a_colleagues_org_memory(client, world):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    steward = world.user(org, roles=["steward"])
    m = client.post(
        "/v1/memories", json={"text": "use the eu-west bucket", "kind": "rule", "visibility": "org"}, headers=alice.h
    ).json()
    assert client.get(f"/v1/memories/{m['id']}", headers=bob.h).status_code == 200
    assert client.patch(f"/v1/memories/{m['id']}", json={"text": "x"}, headers=bob.h).status_code == 403
    assert client.delete(f"/v1/memories/{m['id']}", headers=bob.h).status_code == 403
    assert client.patch(f"/v1/memories/{m['id']}", json={"confidence": 0.9}, headers=steward.h).status_code == 200


def test_delete_memory_removes_all_versions(client, world, admin_engine):
    org = world.org()
    alice = world.user(org)
    m = client.post("/v1/memories", json={"text": "the wiki lives at /docs", "kind": "fact"}, headers=alice.h).json()
    m2 = client.patch(f"/v1/memories/{m['id']}", json={"text": "the wiki lives at /handbook"}, headers=alice.h).json()
    assert client.delete(f"/v1/memories/{m2['id']}", headers=alice.h).status_code == 204
    assert client.get(f"/v1/memories/{m2['id']}", headers=alice.h).status_code == 404
    with admin_engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM memories WHERE root_id = :r"), {"r": m["root_id"]}).scalar() == 0
        actions = (
            c.execute(text("SELECT action FROM audit_log WHERE org_id = :o ORDER BY seq"), {"o": alice.org_id}).scalars().all()
        )
    assert actions[-3:] == ["memory.create", "memory.update", "memory.delete"]


def test_delete_episode_reaches_derived_memories(client, world, admin_engine):
    org = world.org()
    alice = world.user(org)
    e1 = client.post("/v1/episodes", json=ep("my laptop is a thinkpad x1"), headers=alice.h).json()["id"]
    e2 = client.post("/v1/episodes", json=ep("I use vim keybindings"), headers=alice.h).json()["id"]
    only = client.post(
        "/v1/memories",
        json={"text": "alice has a thinkpad x1", "kind": "fact", "sources": [{"type": "episode", "id": e1}]},
        headers=alice.h,
    ).json()
    both = client.post(
        "/v1/memories",
        json={
            "text": "alice: thinkpad, vim",
            "kind": "fact",
            "sources": [{"type": "episode", "id": e1}, {"type": "episode", "id": e2}],
        },
        headers=alice.h,
    ).json()
    r = client.delete(f"/v1/episodes/{e1}", headers=alice.h)
    assert r.status_code == 202
    job = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=alice.h).json()
    stats = {k: v for k, v in job["stats"].items() if k != "vocabulary_words_removed"}  # tests/test_vocabulary.py
    assert job["status"] == "succeeded" and stats == {
        "episodes_removed": 1,
        "memories_removed": 1,
        "memories_quarantined": 1,
        "idempotency_replies_removed": 0,
    }
    assert client.get(f"/v1/episodes/{e1}", headers=alice.h).status_code == 404
    assert client.get(f"/v1/memories/{only['id']}", headers=alice.h).status_code == 404
    assert client.get(f"/v1/memories/{both['id']}", headers=alice.h).json()["status"] == "quarantined"
    with admin_engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM episodes WHERE id = :i"), {"i": e1}).scalar() == 0
        assert (
            c.execute(text("SELECT count(*) FROM audit_log WHERE action='episode.delete' AND target_id=:i"), {"i": e1}).scalar()
            == 1
        )
    hits = client.post("/v1/search", json={"query": "thinkpad"}, headers=alice.h).json()["results"]
    assert all("thinkpad" not in h["text"] for h in hits)
