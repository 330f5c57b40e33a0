"""GET /v1/orgs/current/embedder: the caller's org's embedding model and its re-embedding."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.embedders import service
from app.embedders.schemas import EmbedderOut
from app.kit.errors import COMMON_ERRORS
from app.kit.http.deps import PrincipalDep, SessionDep

router = APIRouter(prefix="/v1/orgs/current", tags=["orgs"], responses=COMMON_ERRORS)


@router.get("/embedder", response_model=EmbedderOut, response_model_exclude_none=True)
def get_embedder(request: Request, db: SessionDep, principal: PrincipalDep):
    """Any key holder of the org may read it: it names a model, nothing of the org's data."""
    s = request.app.state.settings
    return service.describe(db, principal.org_id, default=s.embedding_model, default_dim=s.embedding_dim)
