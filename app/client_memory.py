"""Episode and memory calls of the Python client, mixed into `MemscaleClient` and
`AsyncMemscaleClient` (app/client.py). The request bodies are built once, for both."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from typing_extensions import Unpack

from app.client_types import JSON, EpisodeFields, EpisodeKind, Id, MemoryChanges, MemoryFields, MemoryKind


def _episode(content: str, kind: str, fields: EpisodeFields) -> JSON:
    return {"kind": kind, "content": content, **fields}


def _memory(text: str, kind: str, fields: MemoryFields) -> JSON:
    return {"text": text, "kind": kind, **fields}


def _idem(key: str | None) -> dict[str, str] | None:
    return {"Idempotency-Key": key} if key else None


class MemoryCalls:
    request: Any

    # episodes
    def create_episode(
        self, content: str, *, kind: EpisodeKind = "note", idempotency_key: str | None = None, **fields: Unpack[EpisodeFields]
    ) -> JSON:
        return self.request("POST", "/v1/episodes", json=_episode(content, kind, fields), headers=_idem(idempotency_key))

    def create_episodes(self, items: list[JSON], *, idempotency_key: str | None = None) -> list[str]:
        """Batch (all or nothing); `items` are episode bodies as POST /v1/episodes takes them. Returns the ids."""
        return self.request("POST", "/v1/episodes/batch", json={"items": items}, headers=_idem(idempotency_key))["ids"]

    def get_episode(self, episode_id: Id) -> JSON:
        return self.request("GET", f"/v1/episodes/{episode_id}")

    def delete_episode(self, episode_id: Id) -> str:
        """Returns the deletion job id."""
        return self.request("DELETE", f"/v1/episodes/{episode_id}")["job_id"]

    # memories
    def create_memory(self, text: str, *, kind: MemoryKind = "fact", **fields: Unpack[MemoryFields]) -> JSON:
        return self.request("POST", "/v1/memories", json=_memory(text, kind, fields))

    def get_memory(self, memory_id: Id, *, as_of: datetime | str | None = None) -> JSON:
        return self.request("GET", f"/v1/memories/{memory_id}", params={"as_of": as_of})

    def update_memory(self, memory_id: Id, **changes: Unpack[MemoryChanges]) -> JSON:
        """PATCH: returns the new version (the old one is kept, `superseded`)."""
        return self.request("PATCH", f"/v1/memories/{memory_id}", json=dict(changes))

    def delete_memory(self, memory_id: Id) -> None:
        self.request("DELETE", f"/v1/memories/{memory_id}")


class AsyncMemoryCalls:
    request: Any

    async def create_episode(
        self, content: str, *, kind: EpisodeKind = "note", idempotency_key: str | None = None, **fields: Unpack[EpisodeFields]
    ) -> JSON:
        return await self.request("POST", "/v1/episodes", json=_episode(content, kind, fields), headers=_idem(idempotency_key))

    async def create_episodes(self, items: list[JSON], *, idempotency_key: str | None = None) -> list[str]:
        return (await self.request("POST", "/v1/episodes/batch", json={"items": items}, headers=_idem(idempotency_key)))["ids"]

    async def get_episode(self, episode_id: Id) -> JSON:
        return await self.request("GET", f"/v1/episodes/{episode_id}")

    async def delete_episode(self, episode_id: Id) -> str:
        return (await self.request("DELETE", f"/v1/episodes/{episode_id}"))["job_id"]

    async def create_memory(self, text: str, *, kind: MemoryKind = "fact", **fields: Unpack[MemoryFields]) -> JSON:
        return await self.request("POST", "/v1/memories", json=_memory(text, kind, fields))

    async def get_memory(self, memory_id: Id, *, as_of: datetime | str | None = None) -> JSON:
        return await self.request("GET", f"/v1/memories/{memory_id}", params={"as_of": as_of})

    async def update_memory(self, memory_id: Id, **changes: Unpack[MemoryChanges]) -> JSON:
        return await self.request("PATCH", f"/v1/memories/{memory_id}", json=dict(changes))

    async def delete_memory(self, memory_id: Id) -> None:
        await self.request("DELETE", f"/v1/memories/{memory_id}")
