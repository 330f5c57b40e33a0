from __future__ import annotations

import uuid

from fastapi import APIRouter, BackgroundTasks, Request

from app.jobs.schemas import JobRef
from app.kit.deps import PrincipalDep, SessionDep
from app.kit.errors import COMMON_ERRORS
from app.orgs import forget
from app.orgs.forget import tier_client

router = APIRouter(prefix="/v1/users", tags=["compliance"], responses=COMMON_ERRORS)


@router.delete("/{user_id}/data", status_code=202, response_model=JobRef)
def delete_user_data(user_id: uuid.UUID, request: Request, background: BackgroundTasks, db: SessionDep,
                     principal: PrincipalDep):
    """Right to be forgotten: admins for anyone in their org, any user for themselves. The data is
    gone when the 202 arrives; the inference tier's chunk KV is dropped right after the commit."""
    job_id, stats, hashes = forget.start(db, principal, user_id)
    background.add_task(forget.drop_chunk_kv, request.app.state.sessions, principal.org_id, job_id, stats, hashes,
                        tier_client(request.app.state.settings))
    return JobRef(job_id=job_id)
