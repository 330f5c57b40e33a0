"""MCP round trips against the real service: the test app served by uvicorn on a loopback port, the
MCP server (app/mcp_server.py) in-process, over streamable HTTP with per-request bearer keys, and
as a stdio subprocess; the official `mcp` client on the other end. Every call goes through the
REST API with the caller's key, so another user's private items never come back."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from app.mcp_server import SESSION_TOOLS, build_server, rest_client_factory

REPO = Path(__file__).resolve().parents[1]
TOOLS = {
    "search",
    "context",
    "add_episode",
    "add_memory",
    "session_create",
    "session_context",
    "branches",
    "branch_diff",
    *SESSION_TOOLS,
}


def _serve(asgi_app, **kw):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = uvicorn.Server(uvicorn.Config(asgi_app, host="127.0.0.1", port=port, log_level="warning", **kw))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    return server, thread, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def api_url(app, client):
    """The session's app (its lifespan already run by `client`) on a real loopback port."""
    server, thread, url = _serve(app, lifespan="off")
    yield url
    server.should_exit = True
    thread.join(10)


def data(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content


def error_text(result) -> str:
    assert result.is_error, result.structured_content
    return " ".join(c.text for c in result.content)


async def _add_and_find(mcp: Client, text: str, **kw) -> str:
    ep = data(await mcp.call_tool("add_episode", {"content": text, **kw}))
    hits = data(await mcp.call_tool("search", {"query": text, "types": ["episode"]}))["results"]
    assert ep["id"] in [h["id"] for h in hits], hits
    return ep["id"]


def test_in_process_round_trip_and_no_leak(api_url, world):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    word = uuid.uuid4().hex[:8]  # makes this test's items easy to tell apart

    async def go():
        async with Client(build_server(rest_client_factory(api_url, alice.key))) as mcp:
            assert {t.name for t in (await mcp.list_tools()).tools} == TOOLS
            secret = await _add_and_find(mcp, f"alice private note {word}: the vault pin is 4417")
            shared = await _add_and_find(mcp, f"team note {word}: the vault opens at nine", visibility="org")
            mem = data(
                await mcp.call_tool(
                    "add_memory", {"text": f"vault {word} audits are on fridays", "kind": "rule", "confidence": 0.9}
                )
            )
            assert mem["kind"] == "rule" and mem["version"] == 1
            bad = await mcp.call_tool("add_memory", {"text": "x", "confidence": 5.0})
            assert "422" in error_text(bad)  # the service's validation, surfaced as a tool error
        async with Client(build_server(rest_client_factory(api_url, bob.key))) as mcp:
            own = await _add_and_find(mcp, f"bob note {word}: the vault pin rotates monthly")
            found = data(await mcp.call_tool("search", {"query": f"vault pin {word}", "k": 50}))["results"]
            seen = {h["id"] for h in found}
            assert own in seen and shared in seen and secret not in seen and mem["id"] not in seen
            ctx = data(await mcp.call_tool("context", {"query": f"what is the vault pin {word}", "budget_tokens": 500}))
            assert ctx["tokens"] <= 500 and "4417" not in ctx["text"]
            ctx_ids = {i["id"] for s in ctx["sections"] for i in s["items"]}
            assert secret not in ctx_ids and mem["id"] not in ctx_ids

    asyncio.run(go())


def test_session_tools_through_mcp(api_url, world):
    org = world.org()
    alice, bob = world.user(org), world.user(org)

    async def go():
        async with Client(build_server(rest_client_factory(api_url, alice.key))) as mcp:
            s = data(
                await mcp.call_tool("session_create", {"budget_tokens": 2000, "working_context": {"persona": "a terse SRE"}})
            )
            sid = s["id"]
            added = data(
                await mcp.call_tool(
                    "memory_add",
                    {"session_id": sid, "text": "warm the cache before deploys", "kind": "procedure", "request_heartbeat": True},
                )
            )
            assert added["heartbeat"] is True
            got = data(await mcp.call_tool("memory_retrieve", {"session_id": sid, "query": "cache before deploys"}))
            assert added["id"] in [r["id"] for r in got["results"]]
            team = data(
                await mcp.call_tool(
                    "add_memory", {"text": "team policy: warm the cache before deploys", "kind": "rule", "visibility": "org"}
                )
            )
            rep = data(
                await mcp.call_tool(
                    "working_context_replace", {"session_id": sid, "label": "persona", "old": "terse", "new": "patient"}
                )
            )
            assert rep["text"] == "a patient SRE"
            ctx = data(await mcp.call_tool("session_context", {"session_id": sid}))
            assert "a patient SRE" in ctx["text"] and ctx["tokens"] <= 2000
            missing = await mcp.call_tool("memory_delete", {"session_id": sid, "id": str(uuid.uuid4())})
            assert "not_found" in error_text(missing)
        async with Client(build_server(rest_client_factory(api_url, bob.key))) as mcp:
            other = await mcp.call_tool("archival_search", {"session_id": sid, "query": "cache"})
            assert "404" in error_text(other)  # bob cannot drive alice's session
            s2 = data(await mcp.call_tool("session_create", {}))["id"]
            hits = data(await mcp.call_tool("archival_search", {"session_id": s2, "query": "warm the cache before deploys"}))
            ids = [r["id"] for r in hits["results"]]
            assert team["id"] in ids and added["id"] not in ids  # alice's private memory stays hers

    asyncio.run(go())


def test_session_tool_arguments_match_the_service(client, world):
    """The MCP signatures are hand-written; they must accept exactly what GET /v1/tools declares."""
    rest = client.get("/v1/tools", headers=world.user(world.org()).h).json()["tools"]
    rest = {t["function"]["name"]: set(t["function"]["parameters"].get("properties", {})) for t in rest}

    async def mcp_params():
        async with Client(build_server(rest_client_factory("http://unused", "k"))) as mcp:
            return {
                t.name: set(t.input_schema.get("properties", {})) - {"session_id"}
                for t in (await mcp.list_tools()).tools
                if t.name in SESSION_TOOLS
            }

    assert asyncio.run(mcp_params()) == rest


def test_streamable_http_forwards_each_requests_bearer_key(api_url, world):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    mcp_app = build_server(rest_client_factory(api_url)).streamable_http_app()
    server, thread, url = _serve(mcp_app)

    @asynccontextmanager
    async def connect(key: str | None):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
            async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp:
                yield mcp

    async def go():
        async with connect(alice.key) as mcp:
            assert TOOLS <= {t.name for t in (await mcp.list_tools()).tools}
            secret = await _add_and_find(mcp, "alice over http: the staging db password is swordfish")
        async with connect(bob.key) as mcp:
            seen = data(await mcp.call_tool("search", {"query": "staging db password swordfish"}))["results"]
            assert secret not in {h["id"] for h in seen}
        async with connect(None) as mcp:
            assert "401" in error_text(await mcp.call_tool("search", {"query": "password"}))

    try:
        asyncio.run(go())
    finally:
        server.should_exit = True
        thread.join(10)


def test_stdio_subprocess(api_url, world):
    alice = world.user(world.org())
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from app.mcp_server import run; run('stdio')"],
        cwd=str(REPO),
        env={"MEMSCALE_API_KEY": alice.key, "MEMSCALE_API_URL": api_url},
    )

    async def go():
        async with Client(params, read_timeout_seconds=60) as mcp:
            assert TOOLS <= {t.name for t in (await mcp.list_tools()).tools}
            await _add_and_find(mcp, "stdio round trip: the kafka consumer lag alert fires at 10k")

    asyncio.run(go())
