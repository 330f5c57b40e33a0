from __future__ import annotations

import uuid

from fastapi import APIRouter, Request

from app.episodes.schemas import JobRef
from app.jobs import service as jobs
from app.kit.db import bind_principal
from app.kit.deps import PrincipalDep, SessionDep
from app.kit.errors import COMMON_ERRORS, NotFound
from app.orgs.forget import forget_user, tier_client
from app.orgs.models import User

router = APIRouter(prefix="/v1/users", tags=["compliance"], responses=COMMON_ERRORS)


@router.delete("/{user_id}/data", status_code=202, response_model=JobRef)
def delete_user_data(user_id: uuid.UUID, request: Request, db: SessionDep, principal: PrincipalDep):
    """Right to be forgotten: admins for anyone in their org, any user for themselves."""
    target = db.get(User, user_id)
    if target is None or target.org_id != principal.org_id or (
            user_id != principal.user_id and not principal.has_role("admin")):
        raise NotFound("user not found")
    job = jobs.create(db, org_id=principal.org_id, actor_id=principal.user_id, kind="forget_user",
                      params={"user_id": str(user_id)}, status="running")
    tier = tier_client(request.app.state.settings)
    try:
        stats = forget_user(db, org_id=principal.org_id, user_id=user_id, actor_id=principal.user_id, job_id=job.id,
                            tier=tier)
    finally:
        if tier is not None:
            tier.close()
    bind_principal(db, principal)  # back to the caller's own scope for the rest of the request
    jobs.finish(db, job, stats=stats)
    return JobRef(job_id=job.id)
