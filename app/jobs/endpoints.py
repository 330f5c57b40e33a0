from __future__ import annotations

import uuid

from fastapi import APIRouter, Query, Request

from app.jobs import service
from app.jobs.kinds import JOB_KINDS
from app.jobs.schemas import JobCreated, JobIn, JobKindOut, JobKindsOut, JobOut, JobPage
from app.kit.errors import COMMON_ERRORS
from app.kit.http.deps import SessionDep, require
from app.kit.http.listing import next_cursor

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=COMMON_ERRORS)


@router.post("", status_code=202, response_model=JobCreated)
def create_job(body: JobIn, request: Request, db: SessionDep, principal=require("job", "write")):
    params = service.validate_params(principal, body.kind, body.params, sources=request.app.state.settings.bootstrap_sources)
    job = service.create(
        db, org_id=principal.org_id, actor_id=principal.user_id, kind=body.kind, params=params, branch_id=principal.view.branch_id
    )
    return JobCreated(id=job.id)


@router.get("", response_model=JobPage)
def list_jobs(
    db: SessionDep,
    kind: str | None = Query(default=None, max_length=50),
    status: str | None = Query(default=None, max_length=20),
    cursor: uuid.UUID | None = None,
    limit: int = Query(default=50, ge=1, le=500),
    principal=require("job", "read"),
):
    """The org's jobs, a keyset page at a time (members: their own, as for GET /v1/jobs/{id})."""
    rows = service.page(db, principal, kind=kind, status=status, after=cursor, limit=limit)
    return JobPage(items=[_out(j) for j in rows], next_cursor=next_cursor(rows, limit))


@router.get("/kinds", response_model=JobKindsOut)
def job_kinds(request: Request, principal=require("job", "read")):
    """The job kinds and whether the caller's roles may start each (the rule POST /v1/jobs applies:
    the `job write` permission, and the admin role for admins-only kinds), so a client offers only
    those; POST /v1/jobs stays the authority (its parameters may refuse more)."""
    writes = request.app.state.authorizer.allowed(principal, "job", "write")
    return JobKindsOut(
        kinds=[
            JobKindOut(name=n, may_start=writes and (not k.admins_only or principal.has_role("admin")))
            for n, k in JOB_KINDS.items()
        ]
    )


@router.get("/{job_id}", response_model=JobOut)
def get_job(job_id: uuid.UUID, db: SessionDep, principal=require("job", "read")):
    return _out(service.get(db, principal, job_id))


@router.post("/{job_id}/cancel", response_model=JobOut)
def cancel_job(job_id: uuid.UUID, db: SessionDep, principal=require("job", "read")):
    """Cancel a queued or running job (its creator, stewards, admins): a queued job never runs, a
    running one stops at its next checkpoint (the batch in progress rolls back). Audited."""
    return _out(service.cancel(db, principal, job_id))


def _out(j) -> JobOut:
    return JobOut(
        id=j.id,
        kind=j.kind,
        status=j.status,
        progress=j.progress,
        stats=j.stats,
        error=j.error,
        params=j.params,
        created_at=j.created_at,
        started_at=j.started_at,
        finished_at=j.finished_at,
    )
