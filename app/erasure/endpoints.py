"""The erasure routes: DELETE of an episode (under /v1/episodes, beside its other routes), a user's
right to be forgotten (/v1/users/{id}/data), and the org's retention rules with what each will
remove next (/v1/retention)."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, BackgroundTasks, Request

import app.episodes.endpoints  # noqa: F401  (registers the `episode_id` path convertor the route below uses)
from app.erasure import retention, service
from app.erasure.schemas import RetentionOut
from app.erasure.service import tier_client
from app.jobs.schemas import JobRef
from app.kit.errors import COMMON_ERRORS
from app.kit.http.deps import PrincipalDep, SessionDep, require

episodes = APIRouter(prefix="/v1/episodes", tags=["episodes"], responses=COMMON_ERRORS)
users = APIRouter(prefix="/v1/users", tags=["compliance"], responses=COMMON_ERRORS)
policy = APIRouter(prefix="/v1", tags=["compliance"], responses=COMMON_ERRORS)


@episodes.delete("/{episode_id:episode_id}", status_code=202, response_model=JobRef)
def delete_episode(episode_id: uuid.UUID, db: SessionDep, principal=require("episode", "write")):
    return JobRef(job_id=service.delete_episode(db, principal, episode_id))


@users.delete("/{user_id}/data", status_code=202, response_model=JobRef)
def delete_user_data(user_id: uuid.UUID, request: Request, background: BackgroundTasks, db: SessionDep, principal: PrincipalDep):
    """Right to be forgotten: admins for anyone in their org, any user for themselves. The data is
    gone when the 202 arrives; cartridges trained on it are removed from disk and the inference
    tier's copies (chunk KV, loaded cartridges) dropped right after the commit."""
    job_id, stats, leftovers = service.start_forget_user(db, principal, user_id)
    settings = request.app.state.settings
    background.add_task(
        service.drop_derived_state,
        request.app.state.sessions,
        principal.org_id,
        job_id,
        stats,
        leftovers=leftovers,
        data_dir=settings.data_dir,
        tier=tier_client(settings),
    )
    return JobRef(job_id=job_id)


@policy.get("/retention", response_model=RetentionOut)
def retention_rules(db: SessionDep, principal=require("retention", "read")):
    """The org's retention rules (`memscale admin set-retention`), each with how many items the next
    retention run would remove (counts only)."""
    return retention.rules(db, principal)


router = APIRouter()
router.include_router(episodes)
router.include_router(users)
router.include_router(policy)
