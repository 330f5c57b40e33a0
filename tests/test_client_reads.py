"""The typed client's reads behind the console (app/client_lists.py, and the chain check, retention,
feedback and search explanations), each called against the real app: the sync client over the
TestClient, the async one over httpx.ASGITransport; and its literal types are the API's enums."""

from __future__ import annotations

import asyncio
import typing

import httpx
import pytest
from sqlalchemy import text

from app.client import AsyncMemscaleClient, MemscaleClient, MemscaleError
from app.client_types import AssetKind, AssetStatus, FeedbackSignal, MemoryStatus
from app.knowledge.kinds import ASSET_KINDS
from tests.test_console_assets import asset


@pytest.fixture
def org(client, world, admin_engine):
    """alice (member) and sam (steward and auditor) of one org, eve (admin) of another, each with a
    client; alice's memories of three kinds, one patched; an asset each; an episode each."""
    o, other = world.org(), world.org()
    alice, sam = world.user(o), world.user(o, roles=["steward", "auditor"])
    eve = world.user(other, roles=["admin"])
    cs = {n: MemscaleClient("", a.key, transport=client) for n, a in (("alice", alice), ("sam", sam), ("eve", eve))}
    m = {k: cs["alice"].create_memory(f"kafka consumer lag {k}", kind=k) for k in ("fact", "rule", "procedure")}
    m["v2"] = cs["alice"].update_memory(m["fact"]["id"], text="kafka consumer lag fact, revised")
    a = {"alice": asset(admin_engine, alice, kind="glossary"), "eve": asset(admin_engine, eve, visibility="org")}
    a["schema"] = asset(admin_engine, alice, kind="table_schema")
    e = {n: cs[n].create_episode(f"{n}'s kafka notes") for n in ("alice", "eve")}
    return {"c": cs, "m": m, "a": a, "e": e, "actors": {"alice": alice, "sam": sam, "eve": eve}}


def _ids(page: dict) -> list[str]:
    return [x["id"] for x in page["items"]]


def test_list_calls_page_and_filter_as_the_api_does(org, admin_engine):
    c, m, a, e = org["c"], org["m"], org["a"], org["e"]
    alice, eve = c["alice"], c["eve"]
    current = sorted([m["rule"]["id"], m["procedure"]["id"], m["v2"]["id"]])
    assert _ids(alice.list_memories()) == current
    assert _ids(alice.list_memories(kind=["rule", "procedure"])) == sorted([m["rule"]["id"], m["procedure"]["id"]])
    assert _ids(alice.list_memories(status="superseded")) == [m["fact"]["id"]]
    first = alice.list_memories(limit=2)
    assert _ids(first) == current[:2] and _ids(alice.list_memories(limit=2, cursor=first["next_cursor"])) == current[2:]
    assert _ids(alice.list_memories(as_of=m["rule"]["recorded_at"])) == sorted([m["fact"]["id"], m["rule"]["id"]])
    assert _ids(eve.list_memories()) == []
    assert _ids(alice.memory_versions(m["v2"]["id"])) == [m["v2"]["id"], m["fact"]["id"]]
    assert _ids(alice.memory_versions(m["v2"]["id"], limit=1)) == [m["v2"]["id"]]
    with pytest.raises(MemscaleError) as err:
        eve.memory_versions(m["v2"]["id"])
    assert err.value.status == 404

    assert _ids(alice.list_episodes()) == [e["alice"]["id"]]
    assert _ids(alice.list_episodes(as_of="2020-01-01T00:00:00Z")) == []
    assert _ids(eve.list_episodes(visibility="private")) == [e["eve"]["id"]]

    assert _ids(alice.list_assets()) == sorted([a["alice"], a["schema"]])
    assert _ids(alice.list_assets(kind="table_schema")) == [a["schema"]]
    assert _ids(alice.list_assets(kind=["glossary", "table_schema"])) == sorted([a["alice"], a["schema"]])
    assert _ids(alice.list_assets(status="dropped")) == [] and _ids(eve.list_assets()) == [a["eve"]]
    with pytest.raises(MemscaleError) as err:
        alice.list_assets(kind="spreadsheet")
    assert (err.value.status, err.value.code) == (422, "validation_error")

    job = c["sam"].create_job("consolidate")
    assert _ids(c["sam"].list_jobs(kind="consolidate")) == [job]
    assert _ids(alice.list_jobs()) == [] and job not in _ids(eve.list_jobs())


def test_asset_embedder_and_job_kinds_as_the_api_gives_them(org, client):
    c, a, actors = org["c"], org["a"], org["actors"]
    alice, sam, eve = c["alice"], c["sam"], c["eve"]
    mine = alice.asset(a["alice"])
    assert mine == client.get(f"/v1/knowledge/assets/{a['alice']}", headers=actors["alice"].h).json()
    assert mine["id"] == a["alice"] and mine["kind"] == "glossary" and mine["chunks"] == 0
    assert {k: v for k, v in mine.items() if k != "chunks"} == next(
        x for x in alice.list_assets()["items"] if x["id"] == a["alice"]
    )
    for who, aid in ((sam, a["alice"]), (eve, a["alice"]), (alice, a["eve"])):  # another user's private one; another org's
        with pytest.raises(MemscaleError) as err:
            who.asset(aid)
        assert err.value.status == 404
    with pytest.raises(MemscaleError) as err:
        alice.asset(a["alice"], as_of="2020-01-01T00:00:00Z")
    assert err.value.status == 404

    e = alice.embedder()
    assert e == client.get("/v1/orgs/current/embedder", headers=actors["alice"].h).json()
    assert e["dimensions"] == 384 and e["model"] and "reembedding" not in e
    assert {k["name"]: k["may_start"] for k in sam.job_kinds()["kinds"]}["reembed"] is False
    assert {k["name"]: k["may_start"] for k in eve.job_kinds()["kinds"]}["reembed"] is True
    assert not any(k["may_start"] for k in alice.job_kinds()["kinds"])
    assert alice.knowledge_tree(as_of="2020-01-01T00:00:00Z")["children"] == []


def test_chain_check_retention_feedback_and_explanations(org, admin_engine):
    c, m = org["c"], org["m"]
    sam, alice = c["sam"], c["alice"]
    v = sam.verify_audit()
    assert v["ok"] and v["first_broken"] is None and v["to_seq"] == v["head_seq"] >= 1
    assert sam.verify_audit(since_seq=1, limit=1)["checked"] == 1
    with pytest.raises(MemscaleError) as err:
        alice.verify_audit()
    assert err.value.status == 403
    with admin_engine.begin() as db:
        db.execute(
            text("""UPDATE orgs SET settings = '{"retention": {"episode": 30}}' WHERE id = :o"""),
            {"o": org["actors"]["sam"].org_id},
        )
    assert [(r["item_type"], r["days"], r["due"]) for r in sam.retention()["rules"]] == [("episode", 30, 0)]
    with pytest.raises(MemscaleError) as err:
        alice.retention()
    assert err.value.status == 403

    hits = alice.search("kafka consumer lag rule", types=["memory"], explain=True)
    top = hits["results"][0]
    assert sum(top["explain"]["signals"].values()) == pytest.approx(top["score"], abs=1e-9)
    assert "explain" not in alice.search("kafka consumer lag rule", types=["memory"])["results"][0]
    fid = alice.feedback(hits["retrieval_id"], [{"type": "memory", "id": top["id"], "signal": "helpful"}], outcome="success")
    assert fid and alice.get_memory(top["id"])["utility"]["helpful"] > 0
    with pytest.raises(MemscaleError) as err:  # an item that was not handed out in that retrieval
        alice.feedback(hits["retrieval_id"], [{"type": "memory", "id": m["fact"]["id"], "signal": "wrong"}])
    assert err.value.status == 404


def test_the_async_client_has_the_same_reads(app, org):
    alice = org["actors"]["alice"]
    m, a = org["m"], org["a"]

    async def go():
        async with AsyncMemscaleClient("http://memscale", alice.key, transport=httpx.ASGITransport(app)) as c:
            assert _ids(await c.list_memories(kind=["rule"])) == [m["rule"]["id"]]
            assert _ids(await c.list_episodes()) == [org["e"]["alice"]["id"]]
            assert _ids(await c.list_assets(kind="glossary")) == [a["alice"]]
            assert _ids(await c.list_jobs()) == []
            assert (await c.asset(a["alice"]))["chunks"] == 0
            with pytest.raises(MemscaleError) as err:
                await c.asset(a["eve"])
            assert err.value.status == 404
            assert (await c.embedder())["dimensions"] == 384
            assert not any(k["may_start"] for k in (await c.job_kinds())["kinds"])
            assert (await c.knowledge_tree(as_of="2020-01-01T00:00:00Z"))["children"] == []
            assert _ids(await c.memory_versions(m["v2"]["id"])) == [m["v2"]["id"], m["fact"]["id"]]
            hits = await c.search("kafka consumer lag", types=["memory"], explain=True)
            assert all("explain" in r for r in hits["results"])
            item = {"type": "memory", "id": hits["results"][0]["id"], "signal": "used"}
            assert await c.feedback(hits["retrieval_id"], [item])
            for call in (c.verify_audit(), c.retention()):  # a member: both are refused, as by the sync client
                with pytest.raises(MemscaleError) as err:
                    await call
                assert err.value.status == 403

    asyncio.run(go())


def _enum(schema: dict) -> list:
    return schema["enum"] if "enum" in schema else _enum(next(s for s in schema.get("anyOf", [schema["items"]]) if s))


def test_the_client_types_are_the_apis_enums(app):
    doc = app.openapi()

    def param(path: str, name: str) -> list:
        return _enum(next(p for p in doc["paths"][path]["get"]["parameters"] if p["name"] == name)["schema"])

    assert list(typing.get_args(MemoryStatus)) == param("/v1/memories", "status")
    assert list(typing.get_args(AssetStatus)) == param("/v1/knowledge/assets", "status")
    assert typing.get_args(AssetKind) == ASSET_KINDS
    item = doc["components"]["schemas"]["FeedbackItem"]["properties"]["signal"]
    assert list(typing.get_args(FeedbackSignal)) == _enum(item)
