"""Search, context, feedback and knowledge-tree calls of the Python client, mixed into `MemscaleClient` and
`AsyncMemscaleClient` (app/client.py). The request bodies are built once, for both."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from app.client_types import JSON, FeedbackItem, Id, ItemType, Outcome, SearchFilters


def _search(query: str, k: int, mode: str, types: list[ItemType] | None, filters: SearchFilters | None, **more: Any) -> JSON:
    """The body of POST /v1/search; `more`: instruction, as_of, explain (None: left out)."""
    return {"query": query, "k": k, "mode": mode, "types": types, "filters": filters, **more}


def _feedback(retrieval_id: Id, items: list[FeedbackItem], outcome: Outcome | None) -> JSON:
    return {"retrieval_id": retrieval_id, "items": [dict(i) for i in items], "outcome": outcome}


def _context(
    query: str, session_id: str | None, budget_tokens: int | None, instruction: str | None, as_of: datetime | str | None
) -> JSON:
    return {"query": query, "session_id": session_id, "as_of": as_of, "budget_tokens": budget_tokens, "instruction": instruction}


class SearchCalls:
    request: Any

    def search(
        self,
        query: str,
        *,
        k: int = 10,
        mode: Literal["hybrid", "vector", "text"] = "hybrid",
        types: list[ItemType] | None = None,
        filters: SearchFilters | None = None,
        instruction: str | None = None,
        as_of: datetime | str | None = None,
        explain: bool | None = None,
    ) -> JSON:
        """`{results: [...], retrieval_id, interpreted?}`; `instruction` narrows in words; `as_of`
        reads the memory as recorded then; `explain`: each result adds `explain: {signals: {name:
        contribution}}`, the contributions summing to its score."""
        body = _search(query, k, mode, types, filters, instruction=instruction, as_of=as_of, explain=explain)
        return self.request("POST", "/v1/search", json=body)

    def context(
        self,
        query: str,
        *,
        session_id: str | None = None,
        budget_tokens: int | None = None,
        instruction: str | None = None,
        as_of: datetime | str | None = None,
    ) -> JSON:
        return self.request("POST", "/v1/context", json=_context(query, session_id, budget_tokens, instruction, as_of))

    def feedback(self, retrieval_id: Id, items: list[FeedbackItem], *, outcome: Outcome | None = None) -> str:
        """Signals (`used`, `helpful`, `wrong`, `outdated`) on items of a retrieval the key received;
        returns the feedback id. An item not in that retrieval is a 404, as an absent one."""
        return self.request("POST", "/v1/feedback", json=_feedback(retrieval_id, items, outcome))["id"]

    def knowledge_tree(
        self, path: str | None = None, *, limit: int | None = None, after: str | None = None, as_of: datetime | str | None = None
    ) -> JSON:
        """`{node, children: [{id, kind, name, path, summary?}], truncated, next}`; the top level
        without `path`; `limit` children at a time, the next page with `after=<next>`; `as_of`: the
        nodes written by then (of assets still active)."""
        return self.request("GET", "/v1/knowledge/tree", params={"path": path, "limit": limit, "after": after, "as_of": as_of})

    def knowledge_node(self, node_id: Id) -> JSON:
        """`{id, kind, name, path, text, children, links}`."""
        return self.request("GET", f"/v1/knowledge/nodes/{node_id}")


class AsyncSearchCalls:
    request: Any

    async def search(
        self,
        query: str,
        *,
        k: int = 10,
        mode: Literal["hybrid", "vector", "text"] = "hybrid",
        types: list[ItemType] | None = None,
        filters: SearchFilters | None = None,
        instruction: str | None = None,
        as_of: datetime | str | None = None,
        explain: bool | None = None,
    ) -> JSON:
        body = _search(query, k, mode, types, filters, instruction=instruction, as_of=as_of, explain=explain)
        return await self.request("POST", "/v1/search", json=body)

    async def context(
        self,
        query: str,
        *,
        session_id: str | None = None,
        budget_tokens: int | None = None,
        instruction: str | None = None,
        as_of: datetime | str | None = None,
    ) -> JSON:
        return await self.request("POST", "/v1/context", json=_context(query, session_id, budget_tokens, instruction, as_of))

    async def feedback(self, retrieval_id: Id, items: list[FeedbackItem], *, outcome: Outcome | None = None) -> str:
        return (await self.request("POST", "/v1/feedback", json=_feedback(retrieval_id, items, outcome)))["id"]

    async def knowledge_tree(
        self, path: str | None = None, *, limit: int | None = None, after: str | None = None, as_of: datetime | str | None = None
    ) -> JSON:
        params = {"path": path, "limit": limit, "after": after, "as_of": as_of}
        return await self.request("GET", "/v1/knowledge/tree", params=params)

    async def knowledge_node(self, node_id: Id) -> JSON:
        return await self.request("GET", f"/v1/knowledge/nodes/{node_id}")
