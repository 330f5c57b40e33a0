"""The reads the console added for knowledge assets and as-of episodes: GET /v1/knowledge/assets
(keyset pages under visible_to, filters that only narrow, as of an instant) and `as_of` on the
episode list and item, across two users of one org and a user of another org."""

from __future__ import annotations

import json
import uuid

from sqlalchemy import text

from app.knowledge.kinds import ASSET_KINDS
from tests.helpers import ep
from tests.test_console_api import _all


def asset(engine, who, *, kind="document", title=None, status="active", visibility="private", groups=(), labels=(), at=None):
    """One asset row as bootstrap writes it (owner, scope, a source), written by SQL: the list reads
    rows, and bootstrapping real sources costs a job run per asset."""
    aid = uuid.uuid4()
    with engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO knowledge_assets (org_id, id, owner_id, visibility, groups, labels, kind, source_uri, title,"
                " content_hash, metadata, status, created_at, updated_at)"
                " VALUES (:o, :id, :u, :v, :g, :l, :k, :src, :t, :h, CAST(:m AS jsonb), :s, COALESCE(:at, now()), now())"
            ),
            {
                "o": who.org_id,
                "id": aid,
                "u": who.user_id,
                "v": visibility,
                "g": list(groups),
                "l": list(labels),
                "k": kind,
                "src": f"file:///docs/{aid}.md",
                "t": title or f"{kind} {aid.hex[:6]}",
                "h": aid.hex,
                "m": json.dumps({"pages": 1}),
                "s": status,
                "at": at,
            },
        )
    return str(aid)


def test_asset_list_holds_only_what_each_caller_may_see(client, world, admin_engine):
    org, other = world.org(), world.org()
    alice = world.user(org, groups=["ops"], clearances=["pii"])
    bob = world.user(org, groups=["ops"])
    eve = world.user(other, roles=["admin"])
    mine = [asset(admin_engine, alice, title=f"alice private {i}") for i in range(3)]
    ops = asset(admin_engine, alice, kind="table_schema", visibility="group", groups=["ops"])
    pii = asset(admin_engine, alice, kind="glossary", visibility="org", labels=["pii"])
    bobs = asset(admin_engine, bob, kind="glossary", visibility="org")
    gone = asset(admin_engine, bob, visibility="org", status="dropped")
    elsewhere = asset(admin_engine, eve, visibility="org", title="eve elsewhere")
    # Pages of 2: the union of the pages is exactly the visible set, in id order, no repeats.
    got = _all(client, "/v1/knowledge/assets", alice.h, limit=2)
    assert [a["id"] for a in got] == sorted(mine + [ops, pii, bobs])
    assert {a["id"] for a in _all(client, "/v1/knowledge/assets", bob.h)} == {ops, bobs}  # not pii: no clearance
    assert [a["id"] for a in _all(client, "/v1/knowledge/assets", eve.h)] == [elsewhere]
    first = next(a for a in got if a["id"] == ops)
    assert first["kind"] == "table_schema" and first["groups"] == ["ops"] and first["owner_id"] == str(alice.user_id)
    assert first["source_uri"].startswith("file:///docs/") and first["status"] == "active" and first["metadata"] == {"pages": 1}
    # Filters narrow; they never widen.
    assert [a["id"] for a in _all(client, "/v1/knowledge/assets", alice.h, kind="glossary")] == sorted([pii, bobs])
    assert _all(client, "/v1/knowledge/assets", bob.h, owner=str(alice.user_id), visibility="private") == []
    assert [a["id"] for a in _all(client, "/v1/knowledge/assets", bob.h, group="ops")] == [ops]
    assert [a["id"] for a in _all(client, "/v1/knowledge/assets", alice.h, label="pii")] == [pii]
    assert _all(client, "/v1/knowledge/assets", bob.h, label="pii") == []
    assert [a["id"] for a in _all(client, "/v1/knowledge/assets", alice.h, status="dropped")] == [gone]
    assert _all(client, "/v1/knowledge/assets", eve.h, status="dropped") == []
    # A cursor taken from this org's ids reads nothing of this org for another org's key.
    assert {a["id"] for a in _all(client, "/v1/knowledge/assets", eve.h, cursor=min(mine))} <= {elsewhere}
    # A page hands out content: recorded as a retrieval of its items.
    seen = client.get("/v1/retrievals", params={"item_id": ops}, headers=alice.h).json()["retrievals"]
    assert "list" in {r["kind"] for r in seen}


def test_asset_list_as_of_and_time_filters(client, world, admin_engine):
    org = world.org()
    alice = world.user(org)
    old = asset(admin_engine, alice, at="2026-01-01T00:00:00+00:00")
    new = asset(admin_engine, alice, at="2026-06-01T00:00:00+00:00")
    assert {a["id"] for a in _all(client, "/v1/knowledge/assets", alice.h)} == {old, new}
    assert [a["id"] for a in _all(client, "/v1/knowledge/assets", alice.h, as_of="2026-03-01T00:00:00Z")] == [old]
    assert _all(client, "/v1/knowledge/assets", alice.h, as_of="2025-12-31T00:00:00Z") == []
    assert [a["id"] for a in _all(client, "/v1/knowledge/assets", alice.h, since="2026-03-01T00:00:00Z")] == [new]
    assert [a["id"] for a in _all(client, "/v1/knowledge/assets", alice.h, until="2026-03-01T00:00:00Z")] == [old]


def test_asset_list_parameters_are_checked(client, world):
    alice = world.user(world.org())
    for params in (
        {"limit": 0},
        {"limit": 501},
        {"cursor": "x"},
        {"status": "deleted"},
        {"as_of": "yesterday"},
        {"kind": "spreadsheet"},
    ):
        r = client.get("/v1/knowledge/assets", params=params, headers=alice.h)
        assert r.status_code == 422 and r.json()["error"]["code"], (params, r.text)
    kinds = client.get("/openapi.json").json()["paths"]["/v1/knowledge/assets"]["get"]["parameters"]
    assert next(p for p in kinds if p["name"] == "kind")["schema"]["items"]["enum"] == list(ASSET_KINDS)
    assert client.get("/v1/knowledge/assets").status_code == 401


def test_episode_list_and_item_honour_as_of(client, world):
    """Episodes are append-only: as of t, the list holds those stored by t that the caller may see
    (and that still exist); the item page of one stored later is a 404 then, as for memories."""
    org, other = world.org(), world.org()
    alice, bob = world.user(org), world.user(org)
    eve = world.user(other, roles=["admin"])
    e1 = client.post("/v1/episodes", json=ep("first, org-wide", visibility="org"), headers=alice.h).json()
    e2 = client.post("/v1/episodes", json=ep("second, private"), headers=alice.h).json()
    e3 = client.post("/v1/episodes", json=ep("third, org-wide", visibility="org"), headers=alice.h).json()
    at = e2["created_at"]
    assert [e["id"] for e in _all(client, "/v1/episodes", alice.h, as_of=at)] == sorted([e1["id"], e2["id"]])
    assert [e["id"] for e in _all(client, "/v1/episodes", bob.h, as_of=at)] == [e1["id"]]  # today's access rules
    assert _all(client, "/v1/episodes", eve.h, as_of=at) == []
    assert {e["id"] for e in _all(client, "/v1/episodes", alice.h)} == {e1["id"], e2["id"], e3["id"]}
    assert _all(client, "/v1/episodes", alice.h, as_of="2020-01-01T00:00:00Z") == []
    assert client.get(f"/v1/episodes/{e1['id']}", params={"as_of": at}, headers=bob.h).status_code == 200
    assert client.get(f"/v1/episodes/{e3['id']}", params={"as_of": at}, headers=alice.h).status_code == 404
    assert client.get(f"/v1/episodes/{e3['id']}", headers=alice.h).status_code == 200
    assert client.get("/v1/episodes", params={"as_of": "not a time"}, headers=alice.h).status_code == 422
