"""Typed Python client for the memscale REST API (docs/client_and_mcp.md), sync and async, on httpx.

    with MemscaleClient("http://127.0.0.1:8000", api_key) as ms:
        ep = ms.create_episode("the deploy failed because the cache was cold")
        hits = ms.search("why did the deploy fail")["results"]

Responses are the JSON bodies as plain dicts. Every non-2xx answer raises `MemscaleError(status,
code, message)` parsed from `{"error": {"code", "message"}}`. Both classes expose the same
methods; `AsyncMemscaleClient`'s are coroutines. The key travels per request (never set on a
shared `httpx.Client`), so one transport may serve several keys.
"""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from datetime import datetime
from typing import Any, Literal

import httpx
from typing_extensions import Unpack

from app.client_branches import AsyncBranchCalls, BranchCalls
from app.client_types import (  # noqa: F401 - part of the client's public names
    JSON, TERMINAL_JOB_STATES, Access, EpisodeFields, EpisodeKind, Id, ItemType, JobKind, MemoryChanges, MemoryFields,
    MemoryKind, Outcome, Role, SearchFilters, Visibility,
)


class MemscaleError(Exception):
    """A non-2xx answer: HTTP status, the stable `code`, and the human `message`."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


def _jsonable(v: Any, *, top: bool = False) -> Any:
    """JSON-ready copy: datetimes and UUIDs as strings; unset (None) top-level fields left out."""
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items() if not (top and x is None)}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, uuid.UUID):
        return str(v)
    return v


def _parse(r: httpx.Response) -> Any:
    if r.status_code >= 400:
        try:
            err = r.json()["error"]
            code, message = str(err["code"]), str(err["message"])
        except Exception:  # not our error shape (a proxy, a crash page)
            code, message = "http_error", r.text[:500] or r.reason_phrase
        raise MemscaleError(r.status_code, code, message)
    if r.status_code == 204 or not r.content:
        return None
    return r.json()


class _Base:
    """Request building shared by both clients: `_req(...)` returns httpx.request kwargs."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float):
        self.base_url = (base_url or "").rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self._owned = True
        self.branch: str | None = None  # Memscale-Branch on every request (see in_branch)
        self._closes = True  # False for an in_branch view: the original owns the pool

    def _req(self, method: str, path: str, *, json: Any = None, params: JSON | None = None,
             headers: dict[str, str] | None = None) -> JSON:
        h = dict(headers or {})
        if self.branch:
            h.setdefault("Memscale-Branch", self.branch)
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        kw: JSON = {"method": method, "url": self.base_url + path, "headers": h}
        if self._owned:  # a ready client keeps its own timeout
            kw["timeout"] = self.timeout
        if json is not None:
            kw["json"] = _jsonable(json, top=True)
        if params:
            kw["params"] = {k: str(_jsonable(v)) for k, v in params.items() if v is not None}
        return kw

    def in_branch(self, name: str | None):  # noqa: ANN201
        """The same client working in branch `name` of the org's memory (None: main); it shares
        the connection pool, so close the original, not this one."""
        view = copy.copy(self)
        view.branch, view._closes = name, False
        return view

    # Bodies shared by both clients (one place that knows the API's field names).
    @staticmethod
    def _episode(content: str, kind: str, fields: EpisodeFields) -> JSON:
        return {"kind": kind, "content": content, **fields}

    @staticmethod
    def _idem(key: str | None) -> dict[str, str] | None:
        return {"Idempotency-Key": key} if key else None

    @staticmethod
    def _search(query: str, k: int, mode: str, types: list[ItemType] | None, filters: SearchFilters | None,
                instruction: str | None = None, as_of: datetime | str | None = None) -> JSON:
        return {"query": query, "k": k, "mode": mode, "types": types, "filters": filters, "instruction": instruction,
                "as_of": as_of}


class MemscaleClient(BranchCalls, _Base):
    """Synchronous client. `transport` is an `httpx.BaseTransport`, or a ready client object with
    httpx's `request(method, url, ...)` (an `httpx.Client`, or FastAPI's TestClient, which is an
    `httpx2.Client` in Starlette ≥ 1.0); a ready client is used as is and not closed by `close()`."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float = 30,
                 transport: httpx.BaseTransport | httpx.Client | Any = None):
        super().__init__(base_url, api_key, timeout)
        if transport is not None and not isinstance(transport, httpx.BaseTransport):
            self._http, self._owned = transport, False  # a ready client: httpx.Client, TestClient (httpx2)
        else:
            self._http, self._owned = httpx.Client(transport=transport), True

    def close(self) -> None:
        if self._owned and self._closes:
            self._http.close()

    def __enter__(self) -> MemscaleClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kw: Any) -> Any:
        """Any endpoint: `request("GET", "/v1/...", json=..., params=..., headers=...)` → parsed JSON."""
        return _parse(self._http.request(**self._req(method, path, **kw)))

    # ops
    def healthz(self) -> JSON:
        return self.request("GET", "/healthz")

    def readyz(self) -> JSON:
        return self.request("GET", "/readyz")

    # episodes
    def create_episode(self, content: str, *, kind: EpisodeKind = "note", idempotency_key: str | None = None,
                       **fields: Unpack[EpisodeFields]) -> JSON:
        return self.request("POST", "/v1/episodes", json=self._episode(content, kind, fields),
                            headers=self._idem(idempotency_key))

    def create_episodes(self, items: list[JSON], *, idempotency_key: str | None = None) -> list[str]:
        """Batch (all or nothing); `items` are episode bodies as POST /v1/episodes takes them. Returns the ids."""
        return self.request("POST", "/v1/episodes/batch", json={"items": items},
                            headers=self._idem(idempotency_key))["ids"]

    def get_episode(self, episode_id: Id) -> JSON:
        return self.request("GET", f"/v1/episodes/{episode_id}")

    def delete_episode(self, episode_id: Id) -> str:
        """Returns the deletion job id."""
        return self.request("DELETE", f"/v1/episodes/{episode_id}")["job_id"]

    # memories
    def create_memory(self, text: str, *, kind: MemoryKind = "fact", **fields: Unpack[MemoryFields]) -> JSON:
        return self.request("POST", "/v1/memories", json={"text": text, "kind": kind, **fields})

    def get_memory(self, memory_id: Id, *, as_of: datetime | str | None = None) -> JSON:
        return self.request("GET", f"/v1/memories/{memory_id}", params={"as_of": as_of})

    def update_memory(self, memory_id: Id, **changes: Unpack[MemoryChanges]) -> JSON:
        """PATCH: returns the new version (the old one is kept, `superseded`)."""
        return self.request("PATCH", f"/v1/memories/{memory_id}", json=dict(changes))

    def delete_memory(self, memory_id: Id) -> None:
        self.request("DELETE", f"/v1/memories/{memory_id}")

    # search and context
    def search(self, query: str, *, k: int = 10, mode: Literal["hybrid", "vector", "text"] = "hybrid",
               types: list[ItemType] | None = None, filters: SearchFilters | None = None,
               instruction: str | None = None, as_of: datetime | str | None = None) -> JSON:
        """`{results: [...], retrieval_id, interpreted?}`; `instruction` narrows in words; `as_of`
        reads the memory as recorded then."""
        return self.request("POST", "/v1/search", json=self._search(query, k, mode, types, filters, instruction, as_of))

    def context(self, query: str, *, session_id: str | None = None, budget_tokens: int | None = None,
                instruction: str | None = None, as_of: datetime | str | None = None) -> JSON:
        return self.request("POST", "/v1/context", json={"query": query, "session_id": session_id, "as_of": as_of,
                                                         "budget_tokens": budget_tokens, "instruction": instruction})

    def knowledge_tree(self, path: str | None = None, *, limit: int | None = None, after: str | None = None) -> JSON:
        """`{node, children: [{id, kind, name, path, summary?}], truncated, next}`; the top level
        without `path`; `limit` children at a time, the next page with `after=<next>`."""
        return self.request("GET", "/v1/knowledge/tree", params={"path": path, "limit": limit, "after": after})

    def knowledge_node(self, node_id: Id) -> JSON:
        """`{id, kind, name, path, text, children, links}`."""
        return self.request("GET", f"/v1/knowledge/nodes/{node_id}")

    # sessions and memory tools
    def create_session(self, *, budget_tokens: int | None = None,
                       working_context: dict[str, str] | None = None) -> JSON:
        return self.request("POST", "/v1/sessions",
                            json={"budget_tokens": budget_tokens, "working_context": working_context})

    def add_message(self, session_id: Id, role: Role, content: str) -> JSON:
        return self.request("POST", f"/v1/sessions/{session_id}/messages", json={"role": role, "content": content})

    def get_session_context(self, session_id: Id) -> JSON:
        return self.request("GET", f"/v1/sessions/{session_id}/context")

    def list_tools(self) -> Any:
        """The memory tools as OpenAI function-calling schemas."""
        return self.request("GET", "/v1/tools")

    def call_tool(self, session_id: Id, name: str, arguments: JSON | None = None) -> Any:
        return self.request("POST", f"/v1/sessions/{session_id}/tools/{name}", json=arguments or {})

    def report_outcome(self, session_id: Id, outcome: Outcome, *, reward: float | None = None,
                       note: str | None = None) -> Any:
        return self.request("POST", f"/v1/sessions/{session_id}/outcome",
                            json={"outcome": outcome, "reward": reward, "note": note})

    # jobs
    def create_job(self, kind: JobKind, params: JSON | None = None) -> str:
        """Returns the job id (202)."""
        return self.request("POST", "/v1/jobs", json={"kind": kind, "params": params or {}})["id"]

    def get_job(self, job_id: Id) -> JSON:
        return self.request("GET", f"/v1/jobs/{job_id}")

    def cancel_job(self, job_id: Id) -> JSON:
        """Cancel a queued or running job; returns it (`cancelled`). 409 once it has finished."""
        return self.request("POST", f"/v1/jobs/{job_id}/cancel")

    def wait_job(self, job_id: Id, timeout: float = 60, poll: float = 0.2) -> JSON:
        """Poll until the job is `succeeded`, `failed` or `cancelled` (returned as is); TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get_job(job_id)
            if job["status"] in TERMINAL_JOB_STATES:
                return job
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} still {job['status']} after {timeout}s")
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))

    # lineage and audit
    def get_lineage(self, type: ItemType | str, item_id: Id, *, direction: Literal["up", "down", "both"] = "both",
                    as_of: datetime | str | None = None) -> JSON:
        return self.request("GET", f"/v1/lineage/{type}/{item_id}", params={"direction": direction, "as_of": as_of})

    def get_retrieval(self, retrieval_id: Id) -> JSON:
        return self.request("GET", f"/v1/retrievals/{retrieval_id}")

    def list_audit(self, *, actor: Id | None = None, action: str | None = None, target_type: str | None = None,
                   target_id: Id | None = None, since: datetime | str | None = None,
                   until: datetime | str | None = None, cursor: str | None = None) -> JSON:
        """`{events: [...], next_cursor}` (auditor/admin only)."""
        return self.request("GET", "/v1/audit", params={
            "actor": actor, "action": action, "target_type": target_type, "target_id": target_id,
            "since": since, "until": until, "cursor": cursor})


class AsyncMemscaleClient(AsyncBranchCalls, _Base):
    """Asynchronous client: the same methods as `MemscaleClient`, as coroutines. `transport` is an
    `httpx.AsyncBaseTransport` (e.g. `httpx.ASGITransport(app)`) or a ready `httpx.AsyncClient`
    (or anything with its async `request(method, url, ...)`), used as is and never closed here."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float = 30,
                 transport: httpx.AsyncBaseTransport | httpx.AsyncClient | Any = None):
        super().__init__(base_url, api_key, timeout)
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            self._http, self._owned = transport, False
        else:
            self._http, self._owned = httpx.AsyncClient(transport=transport), True

    async def aclose(self) -> None:
        if self._owned and self._closes:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncMemscaleClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        return _parse(await self._http.request(**self._req(method, path, **kw)))

    async def healthz(self) -> JSON:
        return await self.request("GET", "/healthz")

    async def readyz(self) -> JSON:
        return await self.request("GET", "/readyz")

    async def create_episode(self, content: str, *, kind: EpisodeKind = "note", idempotency_key: str | None = None,
                             **fields: Unpack[EpisodeFields]) -> JSON:
        return await self.request("POST", "/v1/episodes", json=self._episode(content, kind, fields),
                                  headers=self._idem(idempotency_key))

    async def create_episodes(self, items: list[JSON], *, idempotency_key: str | None = None) -> list[str]:
        return (await self.request("POST", "/v1/episodes/batch", json={"items": items},
                                   headers=self._idem(idempotency_key)))["ids"]

    async def get_episode(self, episode_id: Id) -> JSON:
        return await self.request("GET", f"/v1/episodes/{episode_id}")

    async def delete_episode(self, episode_id: Id) -> str:
        return (await self.request("DELETE", f"/v1/episodes/{episode_id}"))["job_id"]

    async def create_memory(self, text: str, *, kind: MemoryKind = "fact", **fields: Unpack[MemoryFields]) -> JSON:
        return await self.request("POST", "/v1/memories", json={"text": text, "kind": kind, **fields})

    async def get_memory(self, memory_id: Id, *, as_of: datetime | str | None = None) -> JSON:
        return await self.request("GET", f"/v1/memories/{memory_id}", params={"as_of": as_of})

    async def update_memory(self, memory_id: Id, **changes: Unpack[MemoryChanges]) -> JSON:
        return await self.request("PATCH", f"/v1/memories/{memory_id}", json=dict(changes))

    async def delete_memory(self, memory_id: Id) -> None:
        await self.request("DELETE", f"/v1/memories/{memory_id}")

    async def search(self, query: str, *, k: int = 10, mode: Literal["hybrid", "vector", "text"] = "hybrid",
                     types: list[ItemType] | None = None, filters: SearchFilters | None = None,
                     instruction: str | None = None, as_of: datetime | str | None = None) -> JSON:
        return await self.request("POST", "/v1/search",
                                  json=self._search(query, k, mode, types, filters, instruction, as_of))

    async def context(self, query: str, *, session_id: str | None = None, budget_tokens: int | None = None,
                      instruction: str | None = None, as_of: datetime | str | None = None) -> JSON:
        return await self.request("POST", "/v1/context", json={"query": query, "session_id": session_id, "as_of": as_of,
                                                               "budget_tokens": budget_tokens, "instruction": instruction})

    async def knowledge_tree(self, path: str | None = None, *, limit: int | None = None,
                             after: str | None = None) -> JSON:
        return await self.request("GET", "/v1/knowledge/tree", params={"path": path, "limit": limit, "after": after})

    async def knowledge_node(self, node_id: Id) -> JSON:
        return await self.request("GET", f"/v1/knowledge/nodes/{node_id}")

    async def create_session(self, *, budget_tokens: int | None = None,
                             working_context: dict[str, str] | None = None) -> JSON:
        return await self.request("POST", "/v1/sessions",
                                  json={"budget_tokens": budget_tokens, "working_context": working_context})

    async def add_message(self, session_id: Id, role: Role, content: str) -> JSON:
        return await self.request("POST", f"/v1/sessions/{session_id}/messages",
                                  json={"role": role, "content": content})

    async def get_session_context(self, session_id: Id) -> JSON:
        return await self.request("GET", f"/v1/sessions/{session_id}/context")

    async def list_tools(self) -> Any:
        return await self.request("GET", "/v1/tools")

    async def call_tool(self, session_id: Id, name: str, arguments: JSON | None = None) -> Any:
        return await self.request("POST", f"/v1/sessions/{session_id}/tools/{name}", json=arguments or {})

    async def report_outcome(self, session_id: Id, outcome: Outcome, *, reward: float | None = None,
                             note: str | None = None) -> Any:
        return await self.request("POST", f"/v1/sessions/{session_id}/outcome",
                                  json={"outcome": outcome, "reward": reward, "note": note})

    async def create_job(self, kind: JobKind, params: JSON | None = None) -> str:
        return (await self.request("POST", "/v1/jobs", json={"kind": kind, "params": params or {}}))["id"]

    async def get_job(self, job_id: Id) -> JSON:
        return await self.request("GET", f"/v1/jobs/{job_id}")

    async def cancel_job(self, job_id: Id) -> JSON:
        return await self.request("POST", f"/v1/jobs/{job_id}/cancel")

    async def wait_job(self, job_id: Id, timeout: float = 60, poll: float = 0.2) -> JSON:
        deadline = time.monotonic() + timeout
        while True:
            job = await self.get_job(job_id)
            if job["status"] in TERMINAL_JOB_STATES:
                return job
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} still {job['status']} after {timeout}s")
            await asyncio.sleep(min(poll, max(0.0, deadline - time.monotonic())))

    async def get_lineage(self, type: ItemType | str, item_id: Id, *, direction: Literal["up", "down", "both"] = "both",
                          as_of: datetime | str | None = None) -> JSON:
        return await self.request("GET", f"/v1/lineage/{type}/{item_id}",
                                  params={"direction": direction, "as_of": as_of})

    async def get_retrieval(self, retrieval_id: Id) -> JSON:
        return await self.request("GET", f"/v1/retrievals/{retrieval_id}")

    async def list_audit(self, *, actor: Id | None = None, action: str | None = None, target_type: str | None = None,
                         target_id: Id | None = None, since: datetime | str | None = None,
                         until: datetime | str | None = None, cursor: str | None = None) -> JSON:
        return await self.request("GET", "/v1/audit", params={
            "actor": actor, "action": action, "target_type": target_type, "target_id": target_id,
            "since": since, "until": until, "cursor": cursor})
