from __future__ import annotations

from fastapi import APIRouter, Request

from app.context import handoff
from app.context.agent import agent_pieces
from app.context.service import build
from app.kit.database.replicas import reads
from app.kit.errors import COMMON_ERRORS
from app.kit.http.deps import ReadTurn, SessionDep, require
from app.search.prepare import prepare
from app.search.schemas import SearchFilters
from app.sessions import service as sessions
from app.sessions.schemas import ContextIn, ContextOut

router = APIRouter(prefix="/v1", tags=["sessions & context"], responses=COMMON_ERRORS)


@router.post("/context", response_model=ContextOut, response_model_exclude_unset=True)
def context(body: ContextIn, request: Request, db: SessionDep, _turn: ReadTurn, principal=require("context", "read")):
    st = request.app.state
    # retrieved memory as of then; a session's own state is today's
    session = sessions.get(db, principal.at(body.as_of), body.session_id) if body.session_id else None
    prepared = prepare(
        db,
        principal,
        query=body.query,
        filters=SearchFilters(),
        instruction=body.instruction,
        as_of=body.as_of,
        settings=st.settings,
        resources=st.resources,
    )
    principal = prepared.principal
    pinned = agent_pieces(db, principal, body.agent_id, prepared.qvec.get()) if body.agent_id else []
    pinned += sessions.session_pieces(db, session) if session is not None else []
    out = build(
        db,
        prepared,
        st.resources,
        budget=body.budget_tokens,
        session=session,
        ef_search=st.settings.hnsw_ef_search,
        tuning=st.tuning,
        read=reads(request, db, principal),
        pinned=pinned or None,
    )
    extra = {"interpreted": prepared.interpreted.model_dump(mode="json")} if prepared.interpreted is not None else {}
    return {**out, "handoff": handoff.sign(st.settings, principal, out["handoff"]), **extra}
