"""The typed client (app/client.py) against the real app: the sync client over the TestClient, the
async one over httpx.ASGITransport. Endpoints still being written (sessions, context, tools,
outcome, lineage, audit) are tested against the REST contract and skipped until their routes exist."""

from __future__ import annotations

import asyncio
import re
import uuid

import httpx
import pytest

from app.client import AsyncMemscaleClient, MemscaleClient, MemscaleError


def _served_paths() -> set[str]:
    from app.main import create_app

    return {re.sub(r"\{[^}]*\}", "{}", p) for p in create_app().openapi()["paths"]}


SERVED = _served_paths()


def needs(path: str):
    """Skip until the route lands (path parameters match whatever they are named)."""
    present = re.sub(r"\{[^}]*\}", "{}", path) in SERVED
    return pytest.mark.skipif(not present, reason=f"{path} not served yet (another engineer is writing it)")


@pytest.fixture
def ms(client, world):
    """A client for a fresh member, plus the actor."""
    actor = world.user(world.org())
    with MemscaleClient("", actor.key, transport=client) as c:
        yield c, actor


def test_ops_and_errors(client, world):
    c = MemscaleClient("", "not-a-key", transport=client)
    assert c.healthz() == {"status": "ok"}
    assert c.readyz()["status"] == "ready"
    with pytest.raises(MemscaleError) as e:
        c.search("anything")
    assert e.value.status == 401 and e.value.code and e.value.message
    me = MemscaleClient("", world.user(world.org()).key, transport=client)
    with pytest.raises(MemscaleError) as e:
        me.get_episode(uuid.uuid4())
    assert (e.value.status, e.value.code) == (404, "not_found")
    with pytest.raises(MemscaleError) as e:
        me.create_memory("x", confidence=7.0)
    assert (e.value.status, e.value.code) == (422, "validation_error")


def test_episodes_round_trip(ms):
    c, actor = ms
    ep = c.create_episode(
        "the deploy failed because the cache was cold",
        kind="trajectory",
        outcome="failure",
        session_id="s-1",
        metadata={"ticket": 42},
        labels=[],
    )
    assert ep["kind"] == "trajectory" and ep["outcome"] == "failure" and ep["owner_id"] == str(actor.user_id)
    assert c.get_episode(ep["id"]) == ep
    # Idempotency: same key and body → the first result; same key, other body → 409.
    a = c.create_episode("rotate keys quarterly", idempotency_key="k-1")
    assert c.create_episode("rotate keys quarterly", idempotency_key="k-1")["id"] == a["id"]
    with pytest.raises(MemscaleError) as e:
        c.create_episode("rotate keys monthly", idempotency_key="k-1")
    assert e.value.status == 409
    ids = c.create_episodes([{"kind": "note", "content": f"batch item {i}"} for i in range(3)])
    assert len(ids) == 3 and c.get_episode(ids[1])["content"] == "batch item 1"
    job_id = c.delete_episode(ids[0])
    assert c.wait_job(job_id, timeout=10)["status"] == "succeeded"
    with pytest.raises(MemscaleError) as e:
        c.get_episode(ids[0])
    assert e.value.status == 404


def test_memories_round_trip(ms):
    c, _ = ms
    m = c.create_memory("staging deploys need a warm cache", kind="rule", confidence=0.9, labels=["ops"])
    assert (m["kind"], m["version"], m["status"], m["labels"]) == ("rule", 1, "active", ["ops"])
    assert c.get_memory(m["id"])["text"] == m["text"]
    m2 = c.update_memory(m["id"], text="staging deploys need a warm cache and a drained queue")
    assert m2["version"] == 2 and m2["root_id"] == m["root_id"]
    c.delete_memory(m2["id"])
    with pytest.raises(MemscaleError) as e:
        c.get_memory(m2["id"])
    assert e.value.status == 404


def test_search_filters_and_acl(client, world):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    a = MemscaleClient("", alice.key, transport=client)
    b = MemscaleClient("", bob.key, transport=client)
    mine = a.create_episode("to restart the ingestion worker run systemctl restart ingest", session_id="s9")
    shared = a.create_episode("the ingestion worker restarts nightly", visibility="org")
    r = a.search("restart ingestion worker", k=5)
    assert r["retrieval_id"] and r["results"][0]["id"] == mine["id"]
    only = a.search("restart ingestion worker", types=["episode"], mode="text", filters={"session_id": "s9"})
    assert [x["id"] for x in only["results"]] == [mine["id"]]
    seen_by_bob = {x["id"] for x in b.search("restart ingestion worker")["results"]}
    assert shared["id"] in seen_by_bob and mine["id"] not in seen_by_bob


def test_jobs_and_wait_timeout(client, world):
    steward = world.user(world.org(), roles=["steward"])
    c = MemscaleClient("", steward.key, transport=client)
    job_id = c.create_job("distill", {"batch_size": 4})
    job = c.get_job(job_id)
    assert job["kind"] == "distill" and job["status"] == "queued" and job["params"]["batch_size"] == 4
    with pytest.raises(TimeoutError):  # no worker runs in the tests: it stays queued
        c.wait_job(job_id, timeout=0.3, poll=0.1)
    member = MemscaleClient("", world.user(world.org()).key, transport=client)
    with pytest.raises(MemscaleError) as e:
        member.create_job("distill")
    assert e.value.status == 403


def test_async_client_over_asgi(client, app, world):
    actor = world.user(world.org())

    async def go():
        async with AsyncMemscaleClient("http://memscale", actor.key, transport=httpx.ASGITransport(app)) as c:
            assert (await c.healthz())["status"] == "ok"
            ep = await c.create_episode("kafka consumer lag alert fires at 10k messages")
            assert (await c.get_episode(ep["id"]))["content"] == ep["content"]
            m = await c.create_memory("consumer lag alerts page the on-call", kind="rule")
            assert (await c.update_memory(m["id"], confidence=0.5))["version"] == 2
            hits = await c.search("kafka consumer lag", types=["episode"])
            assert hits["results"][0]["id"] == ep["id"]
            job = await c.wait_job(await c.delete_episode(ep["id"]), timeout=10)
            assert job["status"] == "succeeded"
            with pytest.raises(MemscaleError) as e:
                await c.get_episode(ep["id"])
            assert e.value.status == 404

    asyncio.run(go())


# --- contract tests for routes in progress (run as soon as they are served) -----------------------


@needs("/v1/context")
def test_context(ms):
    c, _ = ms
    ep = c.create_episode("the billing service retries failed charges three times", kind="trajectory", outcome="success")
    ctx = c.context("how does billing retry charges", budget_tokens=300)
    assert ctx["tokens"] <= 300 and isinstance(ctx["sections"], list) and ctx["retrieval_id"]
    ids = {i["id"] for s in ctx["sections"] for i in s["items"]}
    assert ep["id"] in ids
    assert "handoff" in ctx


@needs("/v1/sessions/{session_id}/messages")
def test_sessions_tools_and_outcome(ms):
    c, _ = ms
    s = c.create_session(budget_tokens=2000, working_context={"persona": "a terse SRE assistant"})
    c.add_message(s["id"], "user", "our deploys fail when the cache is cold")
    c.add_message(s["id"], "assistant", "noted: warm the cache before deploying")
    ctx = c.get_session_context(s["id"])
    assert ctx["tokens"] <= 2000 and 0 <= ctx["pressure"] <= 1 and "cache is cold" in ctx["text"]
    tools = c.list_tools()
    names = {t["function"]["name"] for t in (tools["tools"] if isinstance(tools, dict) else tools)}
    assert {"memory_add", "memory_retrieve", "archival_search", "working_context_replace"} <= names
    added = c.call_tool(s["id"], "memory_add", {"text": "warm the cache before deploying", "kind": "procedure"})
    got = c.call_tool(s["id"], "memory_retrieve", {"query": "warm the cache before deploying"})
    assert added["id"] in {r["id"] for r in got["results"]}
    done = c.report_outcome(s["id"], "success", reward=1.0, note="deploy went through")
    assert (done["outcome"], done["reward"]) == ("success", 1.0)
    with pytest.raises(MemscaleError) as e:
        c.call_tool(s["id"], "no_such_tool", {})
    assert e.value.status in (400, 404, 422)


@needs("/v1/retrievals/{retrieval_id}")
def test_retrieval_record(ms):
    c, actor = ms
    ep = c.create_episode("the vpn certificate expires in march")
    r = c.search("vpn certificate")
    rec = c.get_retrieval(r["retrieval_id"])
    assert rec["query"] == "vpn certificate" and ep["id"] in {i["id"] for i in rec["items"]}


@needs("/v1/lineage/{type}/{id}")
def test_lineage(ms):
    c, _ = ms
    ep = c.create_episode("the cache warms in five minutes")
    m = c.create_memory("the cache warms in five minutes", sources=[{"type": "episode", "id": ep["id"]}])
    g = c.get_lineage("memory", m["id"], direction="up")
    assert {n["id"] for n in g["nodes"]} >= {m["id"]} and isinstance(g["edges"], list)


@needs("/v1/audit")
def test_audit(client, world):
    org = world.org()
    auditor = MemscaleClient("", world.user(org, roles=["auditor"]).key, transport=client)
    member = MemscaleClient("", world.user(org).key, transport=client)
    member.create_episode("an audited write")
    page = auditor.list_audit()
    assert isinstance(page["events"], list) and "next_cursor" in page
    with pytest.raises(MemscaleError) as e:
        member.list_audit()
    assert e.value.status == 403


def test_branches_and_as_of(client, app, world):
    org = world.org()
    steward = world.user(org, roles=("steward",))
    with MemscaleClient("", steward.key, transport=client) as c:
        m = c.create_memory("the staging cluster is called tern", visibility="org")
        then = c.create_branch("exp")["fork_at"]
        exp = c.in_branch("exp")
        v2 = exp.update_memory(m["id"], text="the staging cluster is called puffin")
        assert [b["name"] for b in c.list_branches()] == ["exp"]
        assert [x["text"] for x in exp.search("staging cluster", types=["memory"])["results"]] == [v2["text"]]
        assert [x["text"] for x in c.search("staging cluster", types=["memory"])["results"]] == [m["text"]]
        assert c.get_memory(m["id"], as_of=then)["text"] == m["text"]
        assert [x["change"] for x in c.branch_diff("exp")] == ["new_version"]
        assert c.promote("exp", [v2["id"]])[0]["change"] == "new_version"
        assert [x["text"] for x in c.search("staging cluster", types=["memory"])["results"]] == [v2["text"]]
        c.drop_branch("exp")
        with pytest.raises(MemscaleError) as e:
            exp.search("staging cluster")
        assert e.value.status == 404

    async def go():
        async with AsyncMemscaleClient("http://memscale", steward.key, transport=httpx.ASGITransport(app)) as a:
            await a.create_branch("exp2")
            created = await a.in_branch("exp2").create_memory("only in exp2", visibility="org")
            assert [x["id"] for x in await a.branch_diff("exp2")] == [created["id"]]
            await a.drop_branch("exp2")

    asyncio.run(go())
