from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.jobs import repository as repo
from app.jobs.kinds import BRANCHABLE, JOB_KINDS, imported
from app.jobs.models import Job
from app.kit.database.db import view_of
from app.kit.errors import AppError, Conflict, Forbidden, NotFound

CANCELLABLE = ("queued", "running")


def create(
    db: Session,
    *,
    org_id: uuid.UUID,
    actor_id: uuid.UUID | None,
    kind: str,
    params: dict,
    status: str = "queued",
    branch_id: uuid.UUID | None = None,
) -> Job:
    """`branch_id`: the job reads and writes in that branch (None: main)."""
    if branch_id is not None and kind not in BRANCHABLE:
        raise AppError(
            f"{kind} jobs run in main only (in a branch: {', '.join(BRANCHABLE)})", code="not_in_a_branch", status_code=422
        )
    job = Job(id=uuid.uuid4(), org_id=org_id, kind=kind, params=params, status=status, created_by=actor_id, branch_id=branch_id)
    db.add(job)
    db.flush()
    record(
        db,
        org_id=org_id,
        actor_id=actor_id,
        action="job.create",
        target_type="job",
        target_id=job.id,
        details={"kind": kind, **({"branch_id": str(branch_id)} if branch_id else {})},
    )
    return job


def finish(db: Session, job: Job, *, stats: dict, error: str | None = None) -> None:
    now = datetime.now(UTC)
    job.started_at = job.started_at or now
    job.finished_at = now
    job.status = "failed" if error else "succeeded"
    job.progress = 1.0
    job.stats = stats
    job.error = error
    record(
        db,
        org_id=job.org_id,
        actor_id=job.created_by,
        action=f"job.{job.status}",
        target_type="job",
        target_id=job.id,
        details={"kind": job.kind, "stats": stats},
    )
    db.flush()


def run_now(db: Session, principal: Principal, *, kind: str, params: dict, work: Callable[[uuid.UUID], dict]) -> Job:
    """A job that runs inside the caller's transaction (a deletion cascade): recorded as running,
    `work(job_id)` returns its stats, finished when this returns."""
    job = create(db, org_id=principal.org_id, actor_id=principal.user_id, kind=kind, params=params, status="running")
    finish(db, job, stats=work(job.id))
    return job


def get(db: Session, principal: Principal, job_id: uuid.UUID) -> Job:
    job = repo.get_in_org(db, principal, job_id)
    # Jobs carry stats about the org's data; members see only their own, stewards/admins/auditors all.
    if job is None or (job.created_by != principal.user_id and not principal.has_role("steward", "admin", "auditor")):
        raise NotFound("job not found")
    return job


def page(
    db: Session, principal: Principal, *, kind: str | None, status: str | None, after: uuid.UUID | None, limit: int
) -> list[Job]:
    """A keyset page of the org's jobs under the rule of `get`: members list only their own."""
    mine = None if principal.has_role("steward", "admin", "auditor") else principal.user_id
    return repo.page_in_org(db, principal, kind=kind, status=status, created_by=mine, after=after, limit=limit)


def cancel(db: Session, principal: Principal, job_id: uuid.UUID) -> Job:
    """Cancel a queued or running job: its creator, stewards and admins may (another org's job, or
    a job the caller may not see, is a 404; an auditor who may see it, 403; a finished one, 409).
    A queued job is never claimed; a running one stops at its next checkpoint, whose batch rolls
    back (app/jobs/runner.py). Audited as `job.cancel`."""
    get(db, principal, job_id)  # 404 rules first
    job = repo.get(db, principal.org_id, job_id, for_update=True)  # ordered against a worker's checkpoint
    if job.created_by != principal.user_id and not principal.has_role("steward", "admin"):
        raise Forbidden("only the job's creator, stewards and admins may cancel it")
    if job.status not in CANCELLABLE:
        raise Conflict(f"the job has already {job.status}", code="job_finished")
    was = job.status
    job.status = "cancelled"
    job.finished_at = datetime.now(UTC)
    job.locked_until = None
    db.flush()
    record(
        db,
        org_id=job.org_id,
        actor_id=principal.user_id,
        action="job.cancel",
        target_type="job",
        target_id=job.id,
        details={"kind": job.kind, "was": was},
    )
    return job


def validate_params(principal: Principal, kind: str, params: dict, *, sources: dict[str, str] | None = None) -> dict:
    """Validated params (422 otherwise). `sources`: the operator's allow-listed database sources."""
    from pydantic import ValidationError

    try:
        model = JOB_KINDS[kind].params.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ()))
        raise AppError(f"params.{loc}: {first.get('msg')}", code="validation_error", status_code=422) from None
    if JOB_KINDS[kind].admins_only and not principal.has_role("admin"):
        raise Forbidden(f"only admins may run {kind} jobs")
    if JOB_KINDS[kind].check:
        imported(JOB_KINDS[kind].check)(model)
    if getattr(model, "schema_url", None):
        if not principal.has_role("admin"):
            raise Forbidden("only admins may bootstrap from a database URL")
        from app.jobs.sources import resolve

        resolve(model.schema_url, sources or {}, operator=principal.user_id is None)
    return model.model_dump(mode="json", exclude_none=True)


def lock_cursor(db: Session, org_id: uuid.UUID, pipeline: str):
    """The org's watermark of a pipeline, locked to the commit (`.position` is read and written);
    a branch keeps its own (it starts from the beginning of what it sees)."""
    branch = view_of(db).branch_id
    return repo.lock_cursor(db, org_id, pipeline if branch is None else f"{pipeline}@{branch}")


def get_for_update(db: Session, org_id: uuid.UUID, job_id: uuid.UUID) -> Job:
    """A job of the org by id, locked."""
    return repo.get(db, org_id, job_id, for_update=True)
