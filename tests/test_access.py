"""Another user's or org's data never leaks: 404 on get, absent from search."""

from __future__ import annotations

from tests.helpers import ep


def _search_ids(client, actor, query: str, **kw) -> set[str]:
    r = client.post("/v1/search", json={"query": query, "k": 50, **kw}, headers=actor.h)
    assert r.status_code == 200, r.text
    return {x["id"] for x in r.json()["results"]}


def test_private_item_of_another_user(client, world):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    eid = client.post("/v1/episodes", json=ep("alice's secret salary negotiation notes"), headers=alice.h).json()["id"]
    mid = client.post(
        "/v1/memories", json={"text": "alice's secret salary is negotiable", "kind": "fact"}, headers=alice.h
    ).json()["id"]
    assert client.get(f"/v1/episodes/{eid}", headers=bob.h).status_code == 404
    assert client.get(f"/v1/memories/{mid}", headers=bob.h).status_code == 404
    for mode in ("hybrid", "vector", "text"):
        assert not {eid, mid} & _search_ids(client, bob, "secret salary negotiation", mode=mode)
        assert {eid, mid} <= _search_ids(client, alice, "secret salary negotiation", mode=mode)
    # Not even deletable or patchable by bob: 404, not 403 (existence is not revealed).
    assert client.delete(f"/v1/episodes/{eid}", headers=bob.h).status_code == 404
    assert client.patch(f"/v1/memories/{mid}", json={"text": "x"}, headers=bob.h).status_code == 404


def test_other_org_item_even_when_org_visible(client, world):
    acme, globex = world.org(), world.org()
    a, g = world.user(acme), world.user(globex, roles=["admin"])
    eid = client.post("/v1/episodes", json=ep("acme quarterly revenue target", visibility="org"), headers=a.h).json()["id"]
    assert client.get(f"/v1/episodes/{eid}", headers=g.h).status_code == 404
    assert eid not in _search_ids(client, g, "acme quarterly revenue target")
    colleague = world.user(acme)
    assert client.get(f"/v1/episodes/{eid}", headers=colleague.h).status_code == 200


def test_group_items_only_for_members(client, world):
    org = world.org()
    owner = world.user(org, groups=["finance"])
    member = world.user(org, groups=["finance", "ops"])
    outsider = world.user(org, groups=["ops"])
    eid = client.post(
        "/v1/episodes", json=ep("finance closes the books on day three", visibility="group", groups=["finance"]), headers=owner.h
    ).json()["id"]
    assert client.get(f"/v1/episodes/{eid}", headers=member.h).status_code == 200
    assert client.get(f"/v1/episodes/{eid}", headers=outsider.h).status_code == 404
    assert eid in _search_ids(client, member, "finance closes the books")
    assert eid not in _search_ids(client, outsider, "finance closes the books")


def test_labels_need_clearance(client, world):
    org = world.org()
    writer = world.user(org, clearances=["confidential:m&a"])
    cleared = world.user(org, clearances=["confidential:m&a", "pii"])
    uncleared = world.user(org, clearances=["pii"])
    eid = client.post(
        "/v1/episodes",
        json=ep("the merger with initech closes in march", visibility="org", labels=["confidential:m&a"]),
        headers=writer.h,
    ).json()["id"]
    assert client.get(f"/v1/episodes/{eid}", headers=cleared.h).status_code == 200
    assert client.get(f"/v1/episodes/{eid}", headers=uncleared.h).status_code == 404
    assert eid in _search_ids(client, cleared, "merger initech")
    assert eid not in _search_ids(client, uncleared, "merger initech")
    # Label filter narrows, never widens.
    assert eid in _search_ids(client, cleared, "merger initech", filters={"labels": ["confidential:m&a"]})


def test_memory_cannot_be_wider_than_its_sources(client, world):
    org = world.org()
    alice = world.user(org)
    eid = client.post("/v1/episodes", json=ep("I prefer dark mode in every tool"), headers=alice.h).json()["id"]
    r = client.post(
        "/v1/memories",
        json={
            "text": "alice prefers dark mode",
            "kind": "preference",
            "visibility": "org",
            "sources": [{"type": "episode", "id": eid}],
        },
        headers=alice.h,
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "scope_wider_than_sources"
    ok = client.post(
        "/v1/memories",
        json={"text": "alice prefers dark mode", "kind": "preference", "sources": [{"type": "episode", "id": eid}]},
        headers=alice.h,
    )
    assert ok.status_code == 201 and ok.json()["visibility"] == "private"
    # A source the caller cannot see is a 404, not a way to probe.
    bob = world.user(org)
    r = client.post(
        "/v1/memories", json={"text": "x", "kind": "fact", "sources": [{"type": "episode", "id": eid}]}, headers=bob.h
    )
    assert r.status_code == 404
