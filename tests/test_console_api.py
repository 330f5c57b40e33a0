"""The endpoints the console reads through: the list endpoints it pages through (GET /v1/memories,
/v1/episodes, /v1/jobs), keyset pages that only ever hold what visible_to lets the caller see, across
users and orgs; the audit chain check, the retention rules with what each removes next, and the
versions of a memory."""

from __future__ import annotations

from sqlalchemy import text

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
    mine = [
        client.post("/v1/memories", json={"text": f"alice private {i}", "kind": "fact"}, headers=alice.h).json()["id"]
        for i in range(5)
    ]
    shared = client.post(
        "/v1/memories", json={"text": "ops runbook", "kind": "rule", "visibility": "group", "groups": ["ops"]}, headers=alice.h
    ).json()["id"]
    bobs = client.post("/v1/memories", json={"text": "bob org note", "kind": "fact", "visibility": "org"}, headers=bob.h).json()[
        "id"
    ]
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
    assert _all(client, "/v1/episodes", eve.h, cursor="00000000-0000-0000-0000-000000000000") == _all(
        client, "/v1/episodes", eve.h
    )
    # Each page handed out content, so it is recorded as a retrieval of its items.
    seen = client.get("/v1/retrievals", params={"item_id": e_priv}, headers=alice.h).json()["retrievals"]
    assert "list" in {r["kind"] for r in seen}


def test_list_parameters_are_checked(client, world):
    org = world.org()
    alice = world.user(org)
    for path, params in (
        ("/v1/memories", {"limit": 0}),
        ("/v1/memories", {"limit": 501}),
        ("/v1/memories", {"cursor": "x"}),
        ("/v1/memories", {"status": "deleted"}),
        ("/v1/episodes", {"visibility": "public"}),
        ("/v1/episodes", {"label": "a b"}),
        ("/v1/jobs", {"cursor": "1"}),
        ("/v1/knowledge/assets", {"kind": "spreadsheet"}),
        ("/v1/knowledge/assets", {"kind": ["document"] * 20}),
        ("/v1/knowledge/assets", {"limit": 501}),
    ):
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


def _tamper(admin_engine, org_id, seq: int) -> None:
    """Edit a stored event as a superuser would (past the append-only trigger), without rehashing."""
    with admin_engine.begin() as c:
        c.execute(text("SET LOCAL session_replication_role = replica"))
        c.execute(
            text("UPDATE audit_log SET details = '{\"count\": 99}' WHERE org_id = :o AND seq = :s"), {"o": org_id, "s": seq}
        )


def test_audit_verify_runs_the_services_check_for_the_callers_org_only(client, world, admin_engine, settings):
    from app.audit.service import checkpoint
    from app.kit.cli import admin_session

    org, other = world.org(), world.org()
    alice, auditor = world.user(org), world.user(org, roles=["auditor"])
    eve = world.user(other, roles=["admin"])
    for i in range(4):
        client.post("/v1/episodes", json=ep(f"note {i}"), headers=alice.h)
    ok = client.post("/v1/audit/verify", headers=auditor.h)
    assert ok.status_code == 200, ok.text
    head = ok.json()["head_seq"]
    assert ok.json() == {"ok": True, "checked": head, "from_seq": 1, "to_seq": head, "head_seq": head, "first_broken": None}
    assert client.post("/v1/audit/verify", headers=alice.h).status_code == 403  # members do not read the audit log
    # A window: the link into it is checked against the stored hash before it.
    w = client.post("/v1/audit/verify", json={"since_seq": 3, "limit": 2}, headers=auditor.h).json()
    assert (w["ok"], w["checked"], w["from_seq"], w["to_seq"]) == (True, 2, 3, 4)
    with admin_session(settings) as db:
        cp = checkpoint(db, alice.org_id, settings.audit_secret())
    assert client.post("/v1/audit/verify", json={"checkpoint": cp}, headers=auditor.h).json()["ok"] is True
    _tamper(admin_engine, alice.org_id, 3)
    bad = client.post("/v1/audit/verify", headers=auditor.h).json()
    assert bad["ok"] is False and bad["first_broken"] == {"seq": 3, "reason": "hash does not match the event's fields"}
    assert bad["checked"] == 3
    assert client.post("/v1/audit/verify", json={"since_seq": 4}, headers=auditor.h).json()["ok"] is True
    # Another org's auditor checks its own chain: nothing of this org's break, its own head.
    theirs = client.post("/v1/audit/verify", headers=eve.h).json()
    assert theirs["ok"] is True and theirs["head_seq"] < head
    # A checkpoint of another org never passes for this one (and says nothing about it).
    with admin_session(settings) as db:
        eves = checkpoint(db, eve.org_id, settings.audit_secret())
    r = client.post("/v1/audit/verify", json={"since_seq": 4, "checkpoint": eves}, headers=auditor.h).json()
    assert r["ok"] is False and r["first_broken"]["reason"].startswith("checkpoint mismatch")
    for body in (
        {"since_seq": 0},
        {"limit": 0},
        {"limit": 100_001},
        {"checkpoint": {"seq": 1}},
        {"since": 1},
        {"checkpoint": {**cp, "hash": "zz"}},
        {"checkpoint": {**cp, "seq": False}},
        {"limit": True},
    ):
        r = client.post("/v1/audit/verify", json=body, headers=auditor.h)
        assert r.status_code == 422 and r.json()["error"]["code"], (body, r.text)


def test_retention_lists_the_rules_and_what_the_next_run_removes(client, world, admin_engine, run_job):
    import json

    org, other = world.org(), world.org()
    alice, bob = world.user(org), world.user(org)
    steward, auditor = world.user(org, roles=["steward"]), world.user(org, roles=["auditor"])
    eve = world.user(other, roles=["admin"])
    old = "2020-01-01T00:00:00Z"
    client.post("/v1/episodes", json=ep("alice old private", occurred_at=old), headers=alice.h)
    client.post("/v1/episodes", json=ep("bob old private", occurred_at=old), headers=bob.h)
    client.post("/v1/episodes", json=ep("alice new"), headers=alice.h)
    client.post("/v1/episodes", json=ep("eve old", occurred_at=old), headers=eve.h)
    assert client.get("/v1/retention", headers=steward.h).json()["rules"] == []
    with admin_engine.begin() as c:
        c.execute(
            text("UPDATE orgs SET settings = CAST(:s AS jsonb) WHERE id = :o"),
            {"s": json.dumps({"retention": {"episode": 365}}), "o": alice.org_id},
        )
    for who in (steward, auditor):  # the whole org's due items, though neither may read them
        rules = client.get("/v1/retention", headers=who.h).json()["rules"]
        assert [(r["item_type"], r["days"], r["due"]) for r in rules] == [("episode", 365, 2)]
    assert client.get("/v1/retention", headers=alice.h).status_code == 403
    assert client.get("/v1/retention", headers=eve.h).json()["rules"] == []  # another org: its own rules (none)
    job = run_job(alice.org_id, "retention")  # the run removes exactly what was announced
    assert job.stats["episodes_removed"] == 2
    assert client.get("/v1/retention", headers=steward.h).json()["rules"][0]["due"] == 0


def test_versions_of_a_memory_are_those_the_caller_may_see(client, world):
    org, other = world.org(), world.org()
    alice, bob = world.user(org, roles=["steward"], groups=["ops"]), world.user(org, groups=["ops"])
    eve = world.user(other, roles=["admin"])
    v1 = client.post("/v1/memories", json={"text": "deploys on friday", "kind": "rule"}, headers=alice.h).json()
    v2 = client.post(
        f"/v1/memories/{v1['id']}/declassify",
        json={"visibility": "group", "groups": ["ops"], "reason": "ops need it"},
        headers=alice.h,
    ).json()
    v3 = client.patch(f"/v1/memories/{v2['id']}", json={"text": "deploys on wednesday"}, headers=alice.h).json()
    got = client.get(f"/v1/memories/{v1['id']}/versions", headers=alice.h).json()
    assert [m["id"] for m in got["items"]] == [v3["id"], v2["id"], v1["id"]] and got["next_cursor"] is None
    assert [m["version"] for m in got["items"]] == [3, 2, 1]
    # bob (group ops) sees the versions shared with ops, never the private first one; from any of them.
    mine = client.get(f"/v1/memories/{v3['id']}/versions", headers=bob.h).json()["items"]
    assert [m["id"] for m in mine] == [v3["id"], v2["id"]]
    assert client.get(f"/v1/memories/{v1['id']}/versions", headers=bob.h).status_code == 404
    assert client.get(f"/v1/memories/{v3['id']}/versions", headers=eve.h).status_code == 404
    # as_of: the versions recorded by then.
    at = client.get(f"/v1/memories/{v1['id']}/versions", params={"as_of": v2["recorded_at"]}, headers=alice.h).json()
    assert [m["id"] for m in at["items"]] == [v2["id"], v1["id"]]
    assert (
        client.get(f"/v1/memories/{v1['id']}/versions", params={"limit": 1}, headers=alice.h).json()["items"][0]["id"] == v3["id"]
    )
    for params in ({"limit": 0}, {"limit": 501}, {"as_of": "yesterday"}):
        assert client.get(f"/v1/memories/{v1['id']}/versions", params=params, headers=alice.h).status_code == 422
    assert client.get("/v1/memories/not-an-id/versions", headers=alice.h).status_code == 422
