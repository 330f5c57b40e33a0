from __future__ import annotations

from fastapi import APIRouter, Request

from app.kit.database.replicas import reads
from app.kit.errors import COMMON_ERRORS
from app.kit.http.deps import ReadTurn, SessionDep, require
from app.search import service
from app.search.prepare import prepare
from app.search.schemas import SearchIn, SearchOut

router = APIRouter(prefix="/v1", tags=["search"], responses=COMMON_ERRORS)


@router.post("/search", response_model=SearchOut, response_model_exclude_unset=True)
def search(body: SearchIn, request: Request, db: SessionDep, _turn: ReadTurn, principal=require("search", "read")):
    st = request.app.state
    prepared = prepare(
        db,
        principal,
        query=body.query,
        filters=body.filters,
        instruction=body.instruction,
        as_of=body.as_of,
        settings=st.settings,
        resources=st.resources,
        embed=body.mode != "text",
    )
    results, rid = service.search(
        db, prepared, body, ef_search=st.settings.hnsw_ef_search, tuning=st.tuning, read=reads(request, db, prepared.principal)
    )
    return SearchOut(results=results, retrieval_id=rid, interpreted=prepared.interpreted)
