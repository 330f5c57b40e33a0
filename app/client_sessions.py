"""Session calls of the Python client (messages, working context, the memory tools, outcomes),
mixed into `MemscaleClient` and `AsyncMemscaleClient` (app/client.py)."""

from __future__ import annotations

from typing import Any

from app.client_types import JSON, Id, Outcome, Role


def _session(budget_tokens: int | None, working_context: dict[str, str] | None) -> JSON:
    return {"budget_tokens": budget_tokens, "working_context": working_context}


def _outcome(outcome: Outcome, reward: float | None, note: str | None) -> JSON:
    return {"outcome": outcome, "reward": reward, "note": note}


class SessionCalls:
    request: Any

    def create_session(self, *, budget_tokens: int | None = None, working_context: dict[str, str] | None = None) -> JSON:
        return self.request("POST", "/v1/sessions", json=_session(budget_tokens, working_context))

    def add_message(self, session_id: Id, role: Role, content: str) -> JSON:
        return self.request("POST", f"/v1/sessions/{session_id}/messages", json={"role": role, "content": content})

    def get_session_context(self, session_id: Id) -> JSON:
        return self.request("GET", f"/v1/sessions/{session_id}/context")

    def list_tools(self) -> Any:
        """The memory tools as OpenAI function-calling schemas."""
        return self.request("GET", "/v1/tools")

    def call_tool(self, session_id: Id, name: str, arguments: JSON | None = None) -> Any:
        return self.request("POST", f"/v1/sessions/{session_id}/tools/{name}", json=arguments or {})

    def report_outcome(self, session_id: Id, outcome: Outcome, *, reward: float | None = None, note: str | None = None) -> Any:
        return self.request("POST", f"/v1/sessions/{session_id}/outcome", json=_outcome(outcome, reward, note))


class AsyncSessionCalls:
    request: Any

    async def create_session(self, *, budget_tokens: int | None = None, working_context: dict[str, str] | None = None) -> JSON:
        return await self.request("POST", "/v1/sessions", json=_session(budget_tokens, working_context))

    async def add_message(self, session_id: Id, role: Role, content: str) -> JSON:
        return await self.request("POST", f"/v1/sessions/{session_id}/messages", json={"role": role, "content": content})

    async def get_session_context(self, session_id: Id) -> JSON:
        return await self.request("GET", f"/v1/sessions/{session_id}/context")

    async def list_tools(self) -> Any:
        return await self.request("GET", "/v1/tools")

    async def call_tool(self, session_id: Id, name: str, arguments: JSON | None = None) -> Any:
        return await self.request("POST", f"/v1/sessions/{session_id}/tools/{name}", json=arguments or {})

    async def report_outcome(
        self, session_id: Id, outcome: Outcome, *, reward: float | None = None, note: str | None = None
    ) -> Any:
        return await self.request("POST", f"/v1/sessions/{session_id}/outcome", json=_outcome(outcome, reward, note))
