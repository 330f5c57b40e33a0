"""Statements over the job queue and the pipelines' per-org watermarks.

Claiming and scheduling go through SECURITY DEFINER functions of the migrations
(`memscale_claim_job`, `memscale_org_schedules`): a worker claims across orgs before it knows
which org to bind, and row-level security would otherwise hide every job from it.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.jobs.models import Job, PipelineCursor
from app.kit.tenancy.access import in_org


def get(db: Session, org_id: uuid.UUID, job_id: uuid.UUID, *, for_update: bool = False) -> Job:
    """`for_update`: locked, and read afresh even when the session already holds the row."""
    stmt = select(Job).where(Job.org_id == org_id, Job.id == job_id)
    if for_update:
        stmt = stmt.with_for_update().execution_options(populate_existing=True)
    return db.execute(stmt).scalar_one()


def get_in_org(db: Session, principal: Principal, job_id: uuid.UUID) -> Job | None:
    return db.execute(select(Job).where(Job.id == job_id, in_org(principal, Job))).scalar_one_or_none()


def page_in_org(
    db: Session,
    principal: Principal,
    *,
    kind: str | None,
    status: str | None,
    created_by: uuid.UUID | None,
    after: uuid.UUID | None,
    limit: int,
) -> list[Job]:
    """One keyset page of the org's jobs in the principal's view (`created_by`: only that user's)."""
    stmt = select(Job).where(in_org(principal, Job))
    if kind:
        stmt = stmt.where(Job.kind == kind)
    if status:
        stmt = stmt.where(Job.status == status)
    if created_by is not None:
        stmt = stmt.where(Job.created_by == created_by)
    if after is not None:
        stmt = stmt.where(Job.id > after)
    return list(db.execute(stmt.order_by(Job.id).limit(limit)).scalars())


def claim(db: Session, worker: str, lease_s: int, kinds: list[str], orgs: list | None):
    """(id, org_id, kind) of the oldest claimable job, leased to `worker`; None when there is none."""
    return db.execute(
        text(
            "SELECT id, org_id, kind FROM memscale_claim_job(CAST(:w AS text), CAST(:l AS int), "
            "CAST(:k AS text[]), CAST(:o AS uuid[]))"
        ),
        {"w": worker, "l": lease_s, "k": kinds, "o": [str(o) for o in orgs] if orgs else None},
    ).first()


def org_schedules(db: Session) -> list:
    """(org id, org settings) of every org: the periodic schedules live in the settings."""
    return db.execute(text("SELECT id, settings FROM memscale_org_schedules()")).all()


def insert_scheduled(db: Session, org_id: uuid.UUID, kind: str, slot: str) -> uuid.UUID | None:
    """The periodic job of (org, kind, slot), unless another scheduler created it first."""
    row = db.execute(
        text(
            "INSERT INTO jobs (id, org_id, kind, params, status, schedule_slot) "
            "VALUES (gen_random_uuid(), :o, :k, '{}', 'queued', :s) "
            "ON CONFLICT (org_id, kind, schedule_slot) DO NOTHING RETURNING id"
        ),
        {"o": org_id, "k": kind, "s": slot},
    ).first()
    return row.id if row else None


def lock_cursor(db: Session, org_id: uuid.UUID, pipeline: str) -> PipelineCursor:
    """The org's watermark of `pipeline` (created empty the first time), locked to the commit."""
    db.execute(insert(PipelineCursor).values(org_id=org_id, pipeline=pipeline, position={}).on_conflict_do_nothing())
    return db.execute(
        select(PipelineCursor).where(PipelineCursor.org_id == org_id, PipelineCursor.pipeline == pipeline).with_for_update()
    ).scalar_one()
