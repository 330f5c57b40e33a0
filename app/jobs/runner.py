"""The job queue: Postgres-backed, leased, resumable.

A job runs as a sequence of short transactions (one per batch). Each batch writes its results
*and* the job's cursor/progress in the same transaction, so a worker killed at any point leaves
either the whole batch or none of it; the next worker to claim the job (after the lease runs
out) resumes from the cursor. Pipelines are plain functions `run(ctx, job) -> stats`.

Cancellation (`POST /v1/jobs/{id}/cancel`) sets the job's status to `cancelled` under the row
lock. Every checkpoint takes that lock too and raises `JobCancelled` when it finds the job
cancelled, so the batch being written rolls back with it: a cancelled job leaves the batches it
committed before the cancel (each one whole, with its watermark) and nothing after. Long steps
without a batch (cartridge training) call `heartbeat()` between steps.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

import app.kit.registry  # noqa: F401  (every model mapped before the first flush)
from app.branches import service as branches
from app.config import Settings
from app.jobs import repository as repo
from app.jobs import service as jobs_service
from app.jobs.kinds import JOB_KINDS, imported
from app.jobs.models import Job
from app.kit.database.db import bind_principal, transaction
from app.kit.tenancy.view import MAIN, View
from app.resources import Resources

log = logging.getLogger("memscale.jobs")


class JobCancelled(Exception):
    """Raised at a checkpoint or heartbeat of a job that was cancelled meanwhile."""


PIPELINES: dict[str, str] = {name: kind.pipeline for name, kind in JOB_KINDS.items()}  # kind -> "module:function"
# seconds; org.settings["schedules"] overrides
DEFAULT_SCHEDULES = {name: kind.every_s for name, kind in JOB_KINDS.items() if kind.every_s}
MAX_ATTEMPTS = 3


@dataclass
class JobContext:
    """What a pipeline gets: the org, the job, sessions bound to the org, models, progress."""

    settings: Settings
    sessions: sessionmaker[Session]
    org_id: uuid.UUID
    job_id: uuid.UUID
    resources: Resources
    worker: str = ""
    on_progress: Callable[[float, dict], None] | None = None
    lease_s: int = 60
    view: View = MAIN  # the branch the job runs in (run_job sets it from the job)

    @contextmanager
    def tx(self) -> Iterator[Session]:
        """A transaction that sees every scope of this org (pipelines work across users), in the
        job's branch (main unless the job was created in one)."""
        with transaction(self.sessions) as db:
            bind_principal(db, None, org_id=self.org_id, all_scopes=True, view=self.view)
            yield db

    def _live(self, db: Session) -> Job:
        """The job, locked to the commit; JobCancelled (rolling the caller's batch back) when it
        was cancelled. The lock orders this against a cancel: either the batch commits first or
        the cancel does, never both half-way."""
        job = db.get(Job, (self.org_id, self.job_id), with_for_update=True, populate_existing=True)
        if job.status == "cancelled":
            raise JobCancelled(str(self.job_id))
        return job

    def checkpoint(self, db: Session, *, progress: float, stats: dict, cursor: dict | None = None) -> None:
        """Record progress in the caller's transaction (with the batch it describes); renew the
        lease. Raises JobCancelled (the caller's transaction rolls back) once the job is cancelled."""
        job = self._live(db)
        job.progress = max(0.0, min(1.0, progress))
        job.stats = dict(stats)
        if cursor is not None:
            job.cursor = cursor
        job.locked_until = datetime.now(UTC) + timedelta(seconds=self.lease_s)
        db.flush()
        if self.on_progress:
            self.on_progress(job.progress, job.stats)

    def heartbeat(self) -> None:
        """Between the steps of long work outside a batch: renew the lease, or raise JobCancelled."""
        with self.tx() as db:
            job = self._live(db)
            job.locked_until = datetime.now(UTC) + timedelta(seconds=self.lease_s)


def _pipeline(kind: str) -> Callable[[JobContext, Job], dict]:
    return imported(PIPELINES[kind])


def run_job(ctx: JobContext) -> Job:
    """Run (or resume) one claimed job to the end; failures are recorded, never raised. A job
    cancelled before or while it runs stays `cancelled` (the cancel was audited when it was made)."""
    with ctx.tx() as db:
        job = repo.get(db, ctx.org_id, ctx.job_id)
        if job.status == "cancelled":
            return job
        kind = job.kind
        ctx.view = branches.view_by_id(db, ctx.org_id, job.branch_id)
        if job.attempts > MAX_ATTEMPTS:
            jobs_service.finish(db, job, stats=job.stats, error=f"gave up after {job.attempts - 1} attempts")
            return job
    try:
        stats = _pipeline(kind)(ctx, job)
        error = None
    except JobCancelled:
        log.info("job %s cancelled", ctx.job_id)
        stats, error = None, None
    except Exception as exc:  # a job never crashes the worker; the reason is recorded
        log.exception("job %s failed", ctx.job_id)
        stats, error = None, f"{type(exc).__name__}: {exc}"[:2000]
    with ctx.tx() as db:
        job = repo.get(db, ctx.org_id, ctx.job_id, for_update=True)
        if job.status != "cancelled":  # a cancel after the last checkpoint still wins: the caller was told so
            jobs_service.finish(db, job, stats=stats if stats is not None else job.stats, error=error)
        job.locked_by = None
        job.locked_until = None
    return job


def claim(sessions: sessionmaker[Session], worker: str, lease_s: int, kinds: list[str], orgs: list | None = None) -> tuple | None:
    """The oldest claimable job of `kinds` (of `orgs` only, when given), leased to `worker`."""
    with sessions() as db:
        row = repo.claim(db, worker, lease_s, kinds, orgs)
        db.commit()
        return row


def enqueue_due(sessions: sessionmaker[Session], now: float | None = None, *, only_orgs: set | None = None) -> int:
    """Create the periodic jobs that are due (one per org, kind and time slot, whoever asks);
    `only_orgs` restricts it to some orgs (tests, dedicated workers)."""
    now = now or time.time()
    made = 0
    with sessions() as db:
        orgs = repo.org_schedules(db)
        db.commit()
    for org_id, org_settings in orgs:
        if only_orgs is not None and org_id not in only_orgs:
            continue
        schedules = {**DEFAULT_SCHEDULES, **(org_settings or {}).get("schedules", {})}
        for kind, every in schedules.items():
            if not every or kind not in PIPELINES:
                continue
            slot = str(int(now // int(every)))
            with sessions() as db:
                bind_principal(db, None, org_id=org_id, all_scopes=True)
                inserted = repo.insert_scheduled(db, org_id, kind, slot)
                if inserted:
                    from app.audit.service import record

                    record(
                        db,
                        org_id=org_id,
                        actor_id=None,
                        action="job.schedule",
                        target_type="job",
                        target_id=inserted,
                        details={"kind": kind, "slot": slot},
                    )
                    made += 1
                db.commit()
    return made


def worker_loop(
    settings: Settings,
    sessions: sessionmaker[Session],
    *,
    kinds: list[str] | None = None,
    orgs: list | None = None,
    lease_s: int = 60,
    poll_s: float = 1.0,
    schedule: bool = True,
    max_jobs: int | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Claim and run jobs (of `orgs` only, when given) until `stop()` (or `max_jobs` done).
    Returns the number of jobs run."""
    worker = f"{socket.gethostname()}:{os.getpid()}"
    resources = Resources(settings)
    kinds = kinds or list(PIPELINES)
    done, last_schedule = 0, 0.0
    while not stop() and (max_jobs is None or done < max_jobs):
        if schedule and time.time() - last_schedule > 30:
            enqueue_due(sessions, only_orgs=set(orgs) if orgs else None)
            last_schedule = time.time()
        row = claim(sessions, worker, lease_s, kinds, orgs)
        if row is None:
            time.sleep(poll_s)
            continue
        log.info("running job", extra={"request_id": str(row.id)})
        run_job(
            JobContext(
                settings=settings,
                sessions=sessions,
                org_id=row.org_id,
                job_id=row.id,
                resources=resources,
                worker=worker,
                lease_s=lease_s,
            )
        )
        done += 1
    return done
