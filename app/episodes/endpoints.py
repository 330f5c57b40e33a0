from __future__ import annotations

import uuid

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse
from starlette.convertors import Convertor, register_url_convertor

from app.episodes import service
from app.episodes.deletion import forget_episode
from app.episodes.schemas import BatchOut, EpisodeBatchIn, EpisodeIn, EpisodeOut, JobRef
from app.jobs import service as jobs
from app.kit import idempotency
from app.kit.db import released
from app.kit.deps import SessionDep, require
from app.kit.errors import COMMON_ERRORS, PayloadTooLarge


class _EpisodeIdSegment(Convertor):
    """Any path segment except `batch`: `/v1/episodes/batch` is its own path (POST only), so GET or
    DELETE on it must be a 405 with `Allow: POST`, not a 422 for a malformed episode id."""

    regex = "(?!batch$)[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value) -> str:  # noqa: ANN001
        return str(value)


register_url_convertor("episode_id", _EpisodeIdSegment())

router = APIRouter(prefix="/v1/episodes", tags=["episodes"], responses=COMMON_ERRORS)


@router.post("", status_code=201, response_model=EpisodeOut)
def create_episode(body: EpisodeIn, request: Request, db: SessionDep, principal=require("episode", "write"),
                   idempotency_key: str | None = Header(default=None, min_length=1, max_length=200)):
    # Embed first, with no pooled connection held; then the idempotency lock, held to the commit.
    with released(db, principal):
        vectors = service.embed_all(request.app.state.embedder, [body])
    digest = idempotency.body_hash(body.model_dump(mode="json"))
    prior = idempotency.replay(db, principal, idempotency_key, "episodes.create", digest)
    if prior is not None:
        return JSONResponse(prior, status_code=201)
    out = service.to_out(service.create_many(db, request.app.state.embedder, principal, [body], vectors=vectors)[0])
    idempotency.remember(db, principal, idempotency_key, "episodes.create", digest, 201, out.model_dump(mode="json"))
    return out


@router.post("/batch", status_code=201, response_model=BatchOut)
def create_batch(body: EpisodeBatchIn, request: Request, db: SessionDep, principal=require("episode", "write"),
                 idempotency_key: str | None = Header(default=None, min_length=1, max_length=200)):
    limit = request.app.state.settings.max_batch_items
    if len(body.items) > limit:
        raise PayloadTooLarge(f"a batch holds at most {limit} items", code="batch_too_large")
    # A batch embeds for seconds: first, with no pooled connection held; then the idempotency
    # lock (transaction-scoped, so it must not be taken before `released`), held to the commit.
    with released(db, principal):
        vectors = service.embed_all(request.app.state.embedder, body.items)
    digest = idempotency.body_hash(body.model_dump(mode="json"))
    prior = idempotency.replay(db, principal, idempotency_key, "episodes.batch", digest)
    if prior is not None:
        return JSONResponse(prior, status_code=201)
    rows = service.create_many(db, request.app.state.embedder, principal, body.items, vectors=vectors)
    out = BatchOut(ids=[r.id for r in rows])
    idempotency.remember(db, principal, idempotency_key, "episodes.batch", digest, 201, out.model_dump(mode="json"))
    return out


@router.get("/{episode_id:episode_id}", response_model=EpisodeOut)
def get_episode(episode_id: uuid.UUID, db: SessionDep, principal=require("episode", "read")):
    return service.to_out(service.get(db, principal, episode_id))


@router.delete("/{episode_id:episode_id}", status_code=202, response_model=JobRef)
def delete_episode(episode_id: uuid.UUID, db: SessionDep, principal=require("episode", "write")):
    ep = service.get(db, principal, episode_id)
    service.assert_can_delete(principal, ep)
    job = jobs.create(db, org_id=principal.org_id, actor_id=principal.user_id, kind="delete_episode",
                      params={"episode_id": str(episode_id)}, status="running")
    # The cascade is cheap (ids and lineage), so it runs in this transaction: when the 202
    # arrives, the content is already gone. Re-derivation of quarantined memories is queued work.
    stats = forget_episode(db, org_id=principal.org_id, episode_id=episode_id, actor_id=principal.user_id,
                           job_id=job.id)
    jobs.finish(db, job, stats=stats)
    return JobRef(job_id=job.id)
