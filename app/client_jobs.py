"""Job calls of the Python client (and the org's embedder, which re-embedding jobs change), mixed
into `MemscaleClient` and `AsyncMemscaleClient` (app/client.py). Both `wait_job`s poll with the
same deadline rule (`_pause`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from app.client_types import JSON, TERMINAL_JOB_STATES, Id, JobKind


def _pause(job_id: Id, job: JSON, deadline: float, timeout: float, poll: float) -> float | None:
    """None when the job has finished; otherwise how long to sleep before the next poll
    (TimeoutError once the deadline has passed)."""
    if job["status"] in TERMINAL_JOB_STATES:
        return None
    if time.monotonic() >= deadline:
        raise TimeoutError(f"job {job_id} still {job['status']} after {timeout}s")
    return min(poll, max(0.0, deadline - time.monotonic()))


class JobCalls:
    request: Any

    def create_job(self, kind: JobKind, params: JSON | None = None) -> str:
        """Returns the job id (202)."""
        return self.request("POST", "/v1/jobs", json={"kind": kind, "params": params or {}})["id"]

    def get_job(self, job_id: Id) -> JSON:
        return self.request("GET", f"/v1/jobs/{job_id}")

    def cancel_job(self, job_id: Id) -> JSON:
        """Cancel a queued or running job; returns it (`cancelled`). 409 once it has finished."""
        return self.request("POST", f"/v1/jobs/{job_id}/cancel")

    def job_kinds(self) -> JSON:
        """`{kinds: [{name, may_start}]}`: the job kinds and whether this key's roles may start each."""
        return self.request("GET", "/v1/jobs/kinds")

    def embedder(self) -> JSON:
        """The org's embedder: `{model, dimensions, reembedding?: {model, done, total, started_at}}`."""
        return self.request("GET", "/v1/orgs/current/embedder")

    def wait_job(self, job_id: Id, timeout: float = 60, poll: float = 0.2) -> JSON:
        """Poll until the job is `succeeded`, `failed` or `cancelled` (returned as is); TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get_job(job_id)
            pause = _pause(job_id, job, deadline, timeout, poll)
            if pause is None:
                return job
            time.sleep(pause)


class AsyncJobCalls:
    request: Any

    async def create_job(self, kind: JobKind, params: JSON | None = None) -> str:
        return (await self.request("POST", "/v1/jobs", json={"kind": kind, "params": params or {}}))["id"]

    async def get_job(self, job_id: Id) -> JSON:
        return await self.request("GET", f"/v1/jobs/{job_id}")

    async def cancel_job(self, job_id: Id) -> JSON:
        return await self.request("POST", f"/v1/jobs/{job_id}/cancel")

    async def job_kinds(self) -> JSON:
        return await self.request("GET", "/v1/jobs/kinds")

    async def embedder(self) -> JSON:
        return await self.request("GET", "/v1/orgs/current/embedder")

    async def wait_job(self, job_id: Id, timeout: float = 60, poll: float = 0.2) -> JSON:
        deadline = time.monotonic() + timeout
        while True:
            job = await self.get_job(job_id)
            pause = _pause(job_id, job, deadline, timeout, poll)
            if pause is None:
                return job
            await asyncio.sleep(pause)
