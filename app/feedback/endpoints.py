from __future__ import annotations

from fastapi import APIRouter, Header, Request

from app.feedback import service
from app.feedback.schemas import FeedbackIn, FeedbackOut
from app.kit.errors import COMMON_ERRORS
from app.kit.http import idempotency
from app.kit.http.deps import SessionDep, require

router = APIRouter(prefix="/v1", tags=["feedback"], responses=COMMON_ERRORS)


@router.post("/feedback", status_code=201, response_model=FeedbackOut)
def give_feedback(
    body: FeedbackIn,
    request: Request,
    db: SessionDep,
    principal=require("feedback", "write"),
    idempotency_key: str | None = Header(default=None, min_length=1, max_length=200),
):
    """What the caller made of the items a retrieval handed them (app/feedback/service.py): 404, the
    same for every case, unless the retrieval is theirs (a steward's: any of the org) and every item
    was handed out by it and is visible to them."""
    return idempotency.idempotent(
        db,
        principal,
        idempotency_key,
        "feedback.create",
        body,
        lambda: FeedbackOut(id=service.give(db, principal, body)),
        ttl_s=request.app.state.settings.idempotency_ttl_s,
    )
