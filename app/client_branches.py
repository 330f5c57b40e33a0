"""Branch calls of the Python client, mixed into `MemscaleClient` and
`AsyncMemscaleClient` (app/client.py). To work *in* a branch, use `client.in_branch(name)`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

JSON = dict[str, Any]


def _create(name: str, from_: str, at: datetime | str | None) -> JSON:
    return {"name": name, "from": from_, "at": at}


class BranchCalls:
    request: Any

    def create_branch(self, name: str, *, from_: str = "main", at: datetime | str | None = None) -> JSON:
        """A copy-on-write branch of the org's memory (stewards, admins)."""
        return self.request("POST", "/v1/branches", json=_create(name, from_, at))

    def list_branches(self) -> list[JSON]:
        return self.request("GET", "/v1/branches")["branches"]

    def branch_diff(self, name: str) -> list[JSON]:
        return self.request("GET", f"/v1/branches/{name}/diff")["changes"]

    def promote(self, name: str, ids: list) -> list[JSON]:
        """Apply chosen changes of branch `name` to main (new versions with lineage)."""
        return self.request("POST", f"/v1/branches/{name}/promote", json={"ids": [str(i) for i in ids]})["promoted"]

    def drop_branch(self, name: str) -> None:
        self.request("DELETE", f"/v1/branches/{name}")


class AsyncBranchCalls:
    request: Any

    async def create_branch(self, name: str, *, from_: str = "main", at: datetime | str | None = None) -> JSON:
        return await self.request("POST", "/v1/branches", json=_create(name, from_, at))

    async def list_branches(self) -> list[JSON]:
        return (await self.request("GET", "/v1/branches"))["branches"]

    async def branch_diff(self, name: str) -> list[JSON]:
        return (await self.request("GET", f"/v1/branches/{name}/diff"))["changes"]

    async def promote(self, name: str, ids: list) -> list[JSON]:
        return (await self.request("POST", f"/v1/branches/{name}/promote", json={"ids": [str(i) for i in ids]}))["promoted"]

    async def drop_branch(self, name: str) -> None:
        await self.request("DELETE", f"/v1/branches/{name}")
