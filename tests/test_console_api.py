"""The list endpoints the console pages through (GET /v1/memories, /v1/episodes, /v1/jobs):
keyset pages that only ever hold what visible_to lets the caller see, across users and orgs."""

from __future__ import annotations

from tests.helpers import ep


def _all(client, path: str, h: dict, **params) -> list[dict]:
    """Every page of a list endpoint, following next_cursor."""
    items, cursor = [], None
    for _ in range(50):
        r = client.get(path, params={**params, **({"cursor": cursor} if cursor else {})}, headers=h)
        assert r.status_code == 200, r.text
        items += r.json()["items"]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return items
    raise AssertionError("paging did not end")


def test_memory_and_episode_lists_hold_only_what_each_caller_may_see(client, world):
    org, other = world.org(), world.org()
    alice, bob = world.user(org, groups=["ops"]), world.user(org, groups=["ops"])
    eve = world.user(other, roles=["admin"])
    mine = [client.post("/v1/memories", json={"text": f"alice private {i}", "kind": "fact"}, headers=alice.h).json()["id"]
            for i in range(5)]
    shared = client.post("/v1/memories", json={"text": "ops runbook", "kind": "rule", "visibility": "group",
                                               "groups": ["ops"]}, headers=alice.h).json()["id"]
    bobs = client.post("/v1/memories", json={"text": "bob org note", "kind": "fact", "visibility": "org"},
                       headers=bob.h).json()["id"]
    client.post("/v1/memories", json={"text": "eve elsewhere", "kind": "fact", "visibility": "org"}, headers=eve.h)
    # Pages of 2: the union of the pages is exactly the visible set, in id order, no repeats.
    got = _all(client, "/v1/memories", alice.h, limit=2)
    assert [m["id"] for m in got] == sorted(mine + [shared, bobs])
    assert {m["id"] for m in _all(client, "/v1/memories", bob.h)} == {shared, bobs}
    assert "eve elsewhere" not in {m["text"] for m in _all(client, "/v1/memories", alice.h)}
    assert {m["text"] for m in _all(client, "/v1/memories", eve.h)} == {"eve elsewhere"}
    # Filters narrow; they never widen (bob asking for alice's private items gets none).
    assert [m["id"] for m in _all(client, "/v1/memories", alice.h, kind="rule")] == [shared]
    assert _all(client, "/v1/memories", bob.h, owner=str(alice.user_id), visibility="private") == []
    assert [m["id"] for m in _all(client, "/v1/memories", bob.h, group="ops")] == [shared]
    # A new version supersedes the old one: the default list shows the current version only.
    v2 = client.patch(f"/v1/memories/{mine[0]}", json={"text": "alice private 0 v2"}, headers=alice.h).json()["id"]
    active = {m["id"] for m in _all(client, "/v1/memories", alice.h)}
    assert v2 in active and mine[0] not in active
    assert [m["id"] for m in _all(client, "/v1/memories", alice.h, status="superseded")] == [mine[0]]

    e_org = client.post("/v1/episodes", json=ep("org episode", visibility="org"), headers=alice.h).json()["id"]
    e_priv = client.post("/v1/episodes", json=ep("<img src=x onerror=alert(1)>"), headers=alice.h).json()["id"]
    client.post("/v1/episodes", json=ep("eve episode", visibility="org"), headers=eve.h)
    assert {e["id"] for e in _all(client, "/v1/episodes", alice.h, limit=1)} == {e_org, e_priv}
    assert {e["id"] for e in _all(client, "/v1/episodes", bob.h)} == {e_org}
    assert {e["content"] for e in _all(client, "/v1/episodes", eve.h)} == {"eve episode"}
    # A cursor taken from another org's page reads nothing of this org.
    assert _all(client, "/v1/episodes", eve.h, cursor="00000000-0000-0000-0000-000000000000") == \
        _all(client, "/v1/episodes", eve.h)
    # Each page handed out content, so it is recorded as a retrieval of its items.
    seen = client.get("/v1/retrievals", params={"item_id": e_priv}, headers=alice.h).json()["retrievals"]
    assert "list" in {r["kind"] for r in seen}


def test_list_parameters_are_checked(client, world):
    org = world.org()
    alice = world.user(org)
    for path, params in (("/v1/memories", {"limit": 0}), ("/v1/memories", {"limit": 501}), ("/v1/memories", {"cursor": "x"}),
                         ("/v1/memories", {"status": "deleted"}), ("/v1/episodes", {"visibility": "public"}),
                         ("/v1/episodes", {"label": "a b"}), ("/v1/jobs", {"cursor": "1"})):
        r = client.get(path, params=params, headers=alice.h)
        assert r.status_code == 422 and r.json()["error"]["code"], (path, params, r.text)
    assert client.get("/v1/memories").status_code == 401


def test_job_list_follows_the_job_read_rule(client, world):
    org, other = world.org(), world.org()
    alice, bob = world.user(org), world.user(org)
    steward = world.user(org, roles=["steward"])
    eve = world.user(other, roles=["admin"])
    a = client.post("/v1/jobs", json={"kind": "distill"}, headers=steward.h).json()["id"]
    ids = [j["id"] for j in _all(client, "/v1/jobs", steward.h, kind="distill")]
    assert ids == [a]
    assert _all(client, "/v1/jobs", alice.h) == [] and _all(client, "/v1/jobs", bob.h) == []  # members: their own only
    assert a not in {j["id"] for j in _all(client, "/v1/jobs", eve.h)}
    assert client.get(f"/v1/jobs/{a}", headers=eve.h).status_code == 404
