"""MCP server (official `mcp` 2.x package): a thin adapter over the REST API.

Every tool call goes through `AsyncMemscaleClient` with the caller's own key, so authentication,
authorisation, ACLs, audit and retrieval records are the service's; nothing here touches the
database or decides who may see what.

- stdio: the key comes from `MEMSCALE_API_KEY` (the process runs on behalf of one user).
- streamable HTTP: the `Authorization: Bearer <key>` header of each MCP HTTP request is forwarded
  to the REST API for the tool calls it carries; there is no fallback key, so a caller without
  a key gets the service's 401 as a tool error.

`build_server(client_factory)` builds the server; `run(transport, host, port)` (or the click
command `mcp_command`) serves it. The REST base URL is `MEMSCALE_API_URL` (default
http://127.0.0.1:8000).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any, Literal

import click
import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic_core import to_jsonable_python

from app.client import AsyncMemscaleClient, ItemType, MemscaleError
from app.sessions.tools import TOOLS as SESSION_TOOL_TABLE

DEFAULT_API_URL = "http://127.0.0.1:8000"
# Called per tool call with the bearer key of the MCP request (None on stdio or in-process);
# returns a client for that caller. `AsyncMemscaleClient` is closed after the call when it owns its
# httpx client, so a factory may share one `httpx.AsyncClient` by passing it as `transport`.
ClientFactory = Callable[[str | None], AsyncMemscaleClient]
JSONObj = dict[str, Any]
MemoryKind = Literal["fact", "rule", "preference", "procedure", "schema_hint", "instruction", "skill"]

INSTRUCTIONS = (
    "memscale: long-term memory for agents. `search` finds episodes, memories and knowledge chunks the "
    "caller may see; `context` assembles a budgeted context for a query; `add_episode`/`add_memory` write. "
    "Session tools (memory_*, context_*, working_context_replace, recall_search, archival_search) act on a "
    "MemGPT-style session made with `session_create`; each call is logged in the session's trajectory."
)


def rest_client_factory(base_url: str, default_key: str | None = None, timeout: float = 30) -> ClientFactory:
    """A factory for the REST API at `base_url`: the request's bearer key, else `default_key`."""

    def make(key: str | None) -> AsyncMemscaleClient:
        key = key or default_key
        if not key:
            raise ToolError("401 unauthorized: no API key (send Authorization: Bearer <key>)")
        return AsyncMemscaleClient(base_url, key, timeout=timeout)

    return make


def bearer_key(ctx: Context | None) -> str | None:
    """The key in the `Authorization: Bearer` header of the MCP HTTP request carrying this call."""
    try:
        headers = ctx.headers if ctx is not None else None
    except ValueError:  # no request context (a direct in-process call)
        return None
    value = (headers or {}).get("authorization") or ""
    scheme, _, token = value.partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def build_server(client_factory: ClientFactory, *, name: str = "memscale") -> MCPServer:
    server = MCPServer(name, instructions=INSTRUCTIONS, version="1.0.0")

    async def call(ctx: Context, fn: Callable[[AsyncMemscaleClient], Any], branch: str | None = None) -> JSONObj:
        """`branch`: the call works in that branch of the org's memory (Memscale-Branch)."""
        try:
            async with client_factory(bearer_key(ctx)) as api:
                out = await fn(api.in_branch(branch) if branch else api)
        except MemscaleError as exc:
            raise ToolError(str(exc)) from None  # "404 not_found: ..." for the model to read
        except httpx.HTTPError as exc:
            raise ToolError(f"memscale API unreachable ({type(exc).__name__})") from None
        return out if isinstance(out, dict) else {"result": out}

    async def session_tool(tool: str, ctx: Context, session_id: str, **args: Any) -> JSONObj:
        body = {k: v for k, v in args.items() if v is not None}
        out = await call(ctx, lambda api: api.call_tool(session_id, tool, body))
        if out.get("ok") is False:  # the service ran and logged the call, and the tool refused
            err = out.get("error") or {}
            raise ToolError(f"{err.get('code', 'tool_error')}: {err.get('message', 'the tool failed')}")
        return out

    # --- search, context and writes -------------------------------------------------------------
    @server.tool()
    async def search(
        ctx: Context,
        query: str,
        k: int = 10,
        mode: Literal["hybrid", "vector", "text"] = "hybrid",
        types: list[ItemType] | None = None,
        kinds: list[str] | None = None,
        session_id: str | None = None,
        as_of: str | None = None,
        branch: str | None = None,
    ) -> JSONObj:
        """Hybrid search over what the caller may see: {results: [{type, id, text, score, ...}], retrieval_id}.
        `as_of` (ISO time): the memory as recorded then; `branch`: in that branch of the org's memory."""
        filters = {k_: v for k_, v in {"kinds": kinds, "session_id": session_id}.items() if v is not None}
        return await call(
            ctx, lambda api: api.search(query, k=k, mode=mode, types=types, filters=filters or None, as_of=as_of), branch
        )

    @server.tool()
    async def context(
        ctx: Context,
        query: str,
        session_id: str | None = None,
        budget_tokens: int | None = None,
        as_of: str | None = None,
        branch: str | None = None,
    ) -> JSONObj:
        """Assemble the hot context for a query within budget_tokens: {text, sections, tokens, retrieval_id}.
        `as_of` (ISO time): what was known then; `branch`: in that branch of the org's memory."""
        return await call(
            ctx, lambda api: api.context(query, session_id=session_id, budget_tokens=budget_tokens, as_of=as_of), branch
        )

    @server.tool()
    async def add_episode(
        ctx: Context,
        content: str,
        kind: Literal["conversation", "trajectory", "feedback", "note"] = "note",
        session_id: str | None = None,
        outcome: Literal["success", "failure", "unknown"] | None = None,
        visibility: Literal["private", "group", "org"] = "private",
        groups: list[str] | None = None,
        labels: list[str] | None = None,
        metadata: JSONObj | None = None,
        branch: str | None = None,
    ) -> JSONObj:
        """Record an episode (episodic memory). Private to the caller unless visibility says otherwise."""
        fields = {
            "session_id": session_id,
            "outcome": outcome,
            "visibility": visibility,
            "groups": groups,
            "labels": labels,
            "metadata": metadata,
        }
        return await call(
            ctx, lambda api: api.create_episode(content, kind=kind, **{k: v for k, v in fields.items() if v is not None}), branch
        )

    @server.tool()
    async def add_memory(
        ctx: Context,
        text: str,
        kind: MemoryKind = "fact",
        confidence: float | None = None,
        visibility: Literal["private", "group", "org"] = "private",
        groups: list[str] | None = None,
        labels: list[str] | None = None,
        branch: str | None = None,
    ) -> JSONObj:
        """Store a semantic memory (fact, rule, preference, procedure or schema hint)."""
        fields = {"confidence": confidence, "visibility": visibility, "groups": groups, "labels": labels}
        return await call(
            ctx, lambda api: api.create_memory(text, kind=kind, **{k: v for k, v in fields.items() if v is not None}), branch
        )

    @server.tool()
    async def branches(ctx: Context) -> JSONObj:
        """The org's branches of memory: {result: [{name, from, fork_at, ...}]}."""
        return await call(ctx, lambda api: api.list_branches())

    @server.tool()
    async def branch_diff(ctx: Context, name: str) -> JSONObj:
        """What a branch changed (what the caller may see of it): {result: [{change, type, id, text?, at}]}."""
        return await call(ctx, lambda api: api.branch_diff(name))

    # --- sessions (MemGPT main context) ---------------------------------------------------------
    @server.tool()
    async def session_create(
        ctx: Context, budget_tokens: int | None = None, working_context: dict[str, str] | None = None
    ) -> JSONObj:
        """Open a session (main context) with an optional token budget and labelled working-context blocks."""
        return await call(ctx, lambda api: api.create_session(budget_tokens=budget_tokens, working_context=working_context))

    @server.tool()
    async def session_context(ctx: Context, session_id: str) -> JSONObj:
        """The session's current context: {text, sections, tokens, pressure, summary?}."""
        return await call(ctx, lambda api: api.get_session_context(session_id))

    # --- session memory tools: forwarded to POST /v1/sessions/{id}/tools/{name} -------------------
    # Generated from the service's own table (app/sessions/tools.py, GET /v1/tools): one MCP tool
    # per session tool, taking `session_id` plus that tool's arguments.
    for name, (_, args_model, description) in SESSION_TOOL_TABLE.items():
        server.add_tool(_session_tool_fn(session_tool, name, args_model), name=name, description=description)

    return server


SESSION_TOOLS = tuple(SESSION_TOOL_TABLE)


def _session_tool_fn(session_tool: Callable, name: str, args_model: type) -> Callable:
    """An MCP tool function `(ctx, session_id, **<the tool's arguments>)` whose signature MCP reads
    to publish the input schema. Optional arguments default to None and are left out of the call,
    so the service's own defaults apply."""

    async def tool(ctx: Context, session_id: str, **args: Any) -> JSONObj:
        return await session_tool(name, ctx, session_id, **to_jsonable_python(args))

    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("ctx", kw, annotation=Context), inspect.Parameter("session_id", kw, annotation=str)]
    for field, info in args_model.model_fields.items():
        required = info.is_required()
        annotation = info.annotation if required or field == "request_heartbeat" else info.annotation | None
        default = inspect.Parameter.empty if required else (False if field == "request_heartbeat" else None)
        params.append(inspect.Parameter(field, kw, annotation=annotation, default=default))
    tool.__signature__ = inspect.Signature(params, return_annotation=JSONObj)
    tool.__annotations__ = {p.name: p.annotation for p in params} | {"return": JSONObj}
    tool.__name__ = name
    return tool


def run(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8200) -> None:
    """Serve MCP. stdio: key from MEMSCALE_API_KEY (required). http/streamable-http: each request's
    bearer key, at http://HOST:PORT/mcp. The REST API is MEMSCALE_API_URL."""
    api_url = os.environ.get("MEMSCALE_API_URL", DEFAULT_API_URL)
    if transport == "stdio":
        key = os.environ.get("MEMSCALE_API_KEY")
        if not key:
            raise click.UsageError("stdio mode needs MEMSCALE_API_KEY (the key of the user the agent acts for)")
        build_server(rest_client_factory(api_url, key)).run("stdio")
    elif transport in ("http", "streamable-http"):
        build_server(rest_client_factory(api_url)).run("streamable-http", host=host, port=port)
    else:
        raise click.BadParameter(f"unknown transport {transport!r} (stdio or http)", param_hint="--transport")


mcp_command = click.Command(
    "mcp",
    callback=run,
    help="Serve the MCP server (stdio, or streamable HTTP at /mcp with per-request bearer keys).",
    params=[
        click.Option(
            ["--transport"], type=click.Choice(["stdio", "http", "streamable-http"]), default="stdio", show_default=True
        ),
        click.Option(["--host"], default="127.0.0.1", show_default=True),
        click.Option(["--port"], type=int, default=8200, show_default=True),
    ],
)
