"""Provenance calls of the Python client (lineage, recorded retrievals, the audit log and its chain
check, the retention rules), mixed into
`MemscaleClient` and `AsyncMemscaleClient` (app/client.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from app.client_types import JSON, Id, ItemType


def _audit_params(
    actor: Id | None,
    action: str | None,
    target_type: str | None,
    target_id: Id | None,
    since: datetime | str | None,
    until: datetime | str | None,
    cursor: str | None,
) -> JSON:
    return {
        "actor": actor,
        "action": action,
        "target_type": target_type,
        "target_id": target_id,
        "since": since,
        "until": until,
        "cursor": cursor,
    }


def _verify(since_seq: int | None, limit: int | None, checkpoint: JSON | None) -> JSON:
    return {"since_seq": since_seq, "limit": limit, "checkpoint": checkpoint}


class AuditCalls:
    request: Any

    def get_lineage(
        self,
        type: ItemType | str,
        item_id: Id,
        *,
        direction: Literal["up", "down", "both"] = "both",
        as_of: datetime | str | None = None,
    ) -> JSON:
        return self.request("GET", f"/v1/lineage/{type}/{item_id}", params={"direction": direction, "as_of": as_of})

    def get_retrieval(self, retrieval_id: Id) -> JSON:
        return self.request("GET", f"/v1/retrievals/{retrieval_id}")

    def list_audit(
        self,
        *,
        actor: Id | None = None,
        action: str | None = None,
        target_type: str | None = None,
        target_id: Id | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        cursor: str | None = None,
    ) -> JSON:
        """`{events: [...], next_cursor}` (auditor/admin only)."""
        return self.request("GET", "/v1/audit", params=_audit_params(actor, action, target_type, target_id, since, until, cursor))

    def verify_audit(self, *, since_seq: int | None = None, limit: int | None = None, checkpoint: JSON | None = None) -> JSON:
        """The service's check of the org's chain, one window: `{ok, checked, from_seq, to_seq,
        head_seq, first_broken}` (auditor/admin); the next window from `to_seq + 1`; `checkpoint`: a
        line of `memscale audit checkpoint`, parsed, that the chain must still pass through."""
        return self.request("POST", "/v1/audit/verify", json=_verify(since_seq, limit, checkpoint))

    def retention(self) -> JSON:
        """`{rules: [{item_type, days, cutoff, due}], at}`: the org's rules and what the next run removes."""
        return self.request("GET", "/v1/retention")


class AsyncAuditCalls:
    request: Any

    async def get_lineage(
        self,
        type: ItemType | str,
        item_id: Id,
        *,
        direction: Literal["up", "down", "both"] = "both",
        as_of: datetime | str | None = None,
    ) -> JSON:
        return await self.request("GET", f"/v1/lineage/{type}/{item_id}", params={"direction": direction, "as_of": as_of})

    async def get_retrieval(self, retrieval_id: Id) -> JSON:
        return await self.request("GET", f"/v1/retrievals/{retrieval_id}")

    async def list_audit(
        self,
        *,
        actor: Id | None = None,
        action: str | None = None,
        target_type: str | None = None,
        target_id: Id | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        cursor: str | None = None,
    ) -> JSON:
        return await self.request(
            "GET", "/v1/audit", params=_audit_params(actor, action, target_type, target_id, since, until, cursor)
        )

    async def verify_audit(
        self, *, since_seq: int | None = None, limit: int | None = None, checkpoint: JSON | None = None
    ) -> JSON:
        return await self.request("POST", "/v1/audit/verify", json=_verify(since_seq, limit, checkpoint))

    async def retention(self) -> JSON:
        return await self.request("GET", "/v1/retention")
