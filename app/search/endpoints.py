from __future__ import annotations

from fastapi import APIRouter, Request

from app.kit.db import released
from app.kit.deps import ReadTurn, SessionDep, require
from app.kit.errors import COMMON_ERRORS
from app.kit.replicas import reads
from app.search import service
from app.search.schemas import SearchIn, SearchOut

router = APIRouter(prefix="/v1", tags=["search"], responses=COMMON_ERRORS)


@router.post("/search", response_model=SearchOut)
def search(body: SearchIn, request: Request, db: SessionDep, _turn: ReadTurn, principal=require("search", "read")):
    st = request.app.state
    principal = principal.at(body.as_of)
    # relative times ("last week") are read against an as-of read's instant, as they were meant then
    ctx = {"settings": st.settings, "resources": st.resources, "now": principal.view.as_of}
    if body.instruction and st.settings.instruction_llm:  # no pooled connection held while the LLM reads it
        with released(db, principal):
            body, interpreted = service.with_instruction(body, **ctx)
    else:
        body, interpreted = service.with_instruction(body, **ctx)
    qvec = service.embed_query(db, principal, st.embedder, body.query) if body.mode != "text" else None
    results, rid = service.search(db, principal, st.embedder, body, ef_search=st.settings.hnsw_ef_search, qvec=qvec,
                                  interpreted=interpreted, read=reads(request, db, principal))
    return SearchOut(results=results, retrieval_id=rid, interpreted=interpreted)
