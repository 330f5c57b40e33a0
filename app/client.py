"""Typed Python client for the memscale REST API (docs/client_and_mcp.md), sync and async, on httpx.

    with MemscaleClient("http://127.0.0.1:8000", api_key) as ms:
        ep = ms.create_episode("the deploy failed because the cache was cold")
        hits = ms.search("why did the deploy fail")["results"]

Responses are the JSON bodies as plain dicts. Every non-2xx answer raises `MemscaleError(status,
code, message)` parsed from `{"error": {"code", "message"}}`. Both classes expose the same
methods; `AsyncMemscaleClient`'s are coroutines. The key travels per request (never set on a
shared `httpx.Client`), so one transport may serve several keys.

This module holds the transport, the error and the two classes; their calls come from one mixin
pair per resource group: app/client_memory.py (episodes, memories), app/client_lists.py (the list
endpoints' pages, memory versions), app/client_search.py (search, context, feedback, knowledge
tree), app/client_sessions.py, app/client_jobs.py, app/client_audit.py (lineage, retrievals, audit
log, chain check, retention rules) and app/client_branches.py.
"""

from __future__ import annotations

import copy
import uuid
from datetime import datetime
from typing import Any

import httpx

from app.client_audit import AsyncAuditCalls, AuditCalls
from app.client_branches import AsyncBranchCalls, BranchCalls
from app.client_jobs import AsyncJobCalls, JobCalls
from app.client_lists import AsyncListCalls, ListCalls
from app.client_memory import AsyncMemoryCalls, MemoryCalls
from app.client_search import AsyncSearchCalls, SearchCalls
from app.client_sessions import AsyncSessionCalls, SessionCalls
from app.client_types import (  # noqa: F401 - part of the client's public names
    JSON,
    TERMINAL_JOB_STATES,
    Access,
    AssetKind,
    AssetStatus,
    EpisodeFields,
    EpisodeKind,
    FeedbackItem,
    FeedbackSignal,
    Id,
    ItemType,
    JobKind,
    ListFilters,
    MemoryChanges,
    MemoryFields,
    MemoryKind,
    MemoryStatus,
    Outcome,
    Role,
    SearchFilters,
    Visibility,
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


def _param(v: Any) -> str | list[str]:
    """A query parameter's value; a list repeats the name (`kind=a&kind=b`)."""
    return [str(_jsonable(x)) for x in v] if isinstance(v, list | tuple) else str(_jsonable(v))


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

    def _req(
        self, method: str, path: str, *, json: Any = None, params: JSON | None = None, headers: dict[str, str] | None = None
    ) -> JSON:
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
            kw["params"] = {k: _param(v) for k, v in params.items() if v is not None}
        return kw

    def in_branch(self, name: str | None):
        """The same client working in branch `name` of the org's memory (None: main); it shares
        the connection pool, so close the original, not this one."""
        view = copy.copy(self)
        view.branch, view._closes = name, False
        return view


class MemscaleClient(MemoryCalls, ListCalls, SearchCalls, SessionCalls, JobCalls, AuditCalls, BranchCalls, _Base):
    """Synchronous client. `transport` is an `httpx.BaseTransport`, or a ready client object with
    httpx's `request(method, url, ...)` (an `httpx.Client`, or FastAPI's TestClient, which is an
    `httpx2.Client` in Starlette ≥ 1.0); a ready client is used as is and not closed by `close()`."""

    def __init__(
        self, base_url: str, api_key: str | None, timeout: float = 30, transport: httpx.BaseTransport | httpx.Client | Any = None
    ):
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


class AsyncMemscaleClient(
    AsyncMemoryCalls, AsyncListCalls, AsyncSearchCalls, AsyncSessionCalls, AsyncJobCalls, AsyncAuditCalls, AsyncBranchCalls, _Base
):
    """Asynchronous client: the same methods as `MemscaleClient`, as coroutines. `transport` is an
    `httpx.AsyncBaseTransport` (e.g. `httpx.ASGITransport(app)`) or a ready `httpx.AsyncClient`
    (or anything with its async `request(method, url, ...)`), used as is and never closed here."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        timeout: float = 30,
        transport: httpx.AsyncBaseTransport | httpx.AsyncClient | Any = None,
    ):
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
