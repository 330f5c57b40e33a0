"""List calls of the Python client (the keyset pages the console browses), mixed into
`MemscaleClient` and `AsyncMemscaleClient` (app/client.py). Each returns one page `{items,
next_cursor}`; pass `cursor=page["next_cursor"]` for the next (None: that was the last). Filters
only narrow what the key may see; `as_of` lists the state as recorded then."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from typing_extensions import Unpack

from app.client_types import JSON, AssetStatus, Id, ListFilters, MemoryStatus


def _list(filters: ListFilters, **more: Any) -> JSON:
    return {**filters, **more}


class ListCalls:
    request: Any

    def list_memories(
        self, *, status: MemoryStatus = "active", as_of: datetime | str | None = None, **filters: Unpack[ListFilters]
    ) -> JSON:
        """Memory versions that had `status` (in the client's branch, as of `as_of`); `since`/`until` on `recorded_at`."""
        return self.request("GET", "/v1/memories", params=_list(filters, status=status, as_of=as_of))

    def list_episodes(self, *, as_of: datetime | str | None = None, **filters: Unpack[ListFilters]) -> JSON:
        """Episodes (`as_of`: those stored by then); `since`/`until` on `occurred_at`."""
        return self.request("GET", "/v1/episodes", params=_list(filters, as_of=as_of))

    def list_assets(
        self, *, status: AssetStatus = "active", as_of: datetime | str | None = None, **filters: Unpack[ListFilters]
    ) -> JSON:
        """Knowledge assets (`kind`: AssetKind values); `since`/`until` on `created_at`."""
        return self.request("GET", "/v1/knowledge/assets", params=_list(filters, status=status, as_of=as_of))

    def asset(self, asset_id: Id, *, as_of: datetime | str | None = None) -> JSON:
        """One knowledge asset: the list's fields and `chunks` (how many of its chunks the key may
        see); 404 for one the key may not see, as for an absent one."""
        return self.request("GET", f"/v1/knowledge/assets/{asset_id}", params={"as_of": as_of})

    def list_jobs(
        self, *, kind: str | None = None, status: str | None = None, cursor: str | None = None, limit: int | None = None
    ) -> JSON:
        """The org's jobs (members: their own); `kind` any job kind or `forget_user`."""
        return self.request("GET", "/v1/jobs", params={"kind": kind, "status": status, "cursor": cursor, "limit": limit})

    def memory_versions(self, memory_id: Id, *, as_of: datetime | str | None = None, limit: int | None = None) -> JSON:
        """The versions of this memory's root the key may see, newest first (`next_cursor` always null)."""
        return self.request("GET", f"/v1/memories/{memory_id}/versions", params={"as_of": as_of, "limit": limit})


class AsyncListCalls:
    request: Any

    async def list_memories(
        self, *, status: MemoryStatus = "active", as_of: datetime | str | None = None, **filters: Unpack[ListFilters]
    ) -> JSON:
        return await self.request("GET", "/v1/memories", params=_list(filters, status=status, as_of=as_of))

    async def list_episodes(self, *, as_of: datetime | str | None = None, **filters: Unpack[ListFilters]) -> JSON:
        return await self.request("GET", "/v1/episodes", params=_list(filters, as_of=as_of))

    async def list_assets(
        self, *, status: AssetStatus = "active", as_of: datetime | str | None = None, **filters: Unpack[ListFilters]
    ) -> JSON:
        return await self.request("GET", "/v1/knowledge/assets", params=_list(filters, status=status, as_of=as_of))

    async def asset(self, asset_id: Id, *, as_of: datetime | str | None = None) -> JSON:
        return await self.request("GET", f"/v1/knowledge/assets/{asset_id}", params={"as_of": as_of})

    async def list_jobs(
        self, *, kind: str | None = None, status: str | None = None, cursor: str | None = None, limit: int | None = None
    ) -> JSON:
        return await self.request("GET", "/v1/jobs", params={"kind": kind, "status": status, "cursor": cursor, "limit": limit})

    async def memory_versions(self, memory_id: Id, *, as_of: datetime | str | None = None, limit: int | None = None) -> JSON:
        return await self.request("GET", f"/v1/memories/{memory_id}/versions", params={"as_of": as_of, "limit": limit})
