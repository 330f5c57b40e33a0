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
    gone when the 202 arrives; cartridges trained on it are removed from disk and the inference
    tier's copies (chunk KV, loaded cartridges) dropped right after the commit."""
    job_id, stats, leftovers = forget.start(db, principal, user_id)
    settings = request.app.state.settings
    background.add_task(forget.drop_derived_state, request.app.state.sessions, principal.org_id, job_id, stats,
                        leftovers, settings.data_dir, tier_client(settings))
    return JobRef(job_id=job_id)
