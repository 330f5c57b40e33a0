from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Body, Request

from app.kit.errors import COMMON_ERRORS
from app.kit.http.deps import SessionDep, require
from app.lineage.service import record_read
from app.sessions import service, tools
from app.sessions.schemas import MessageIn, MessageOut, OutcomeIn, SessionContextOut, SessionIn, SessionOut, ToolList, ToolResult

router = APIRouter(prefix="/v1", tags=["sessions & context"], responses=COMMON_ERRORS)


def _out(s) -> SessionOut:
    return SessionOut(
        id=s.id,
        budget_tokens=s.budget_tokens,
        working_context=s.working_context,
        summary=s.summary,
        evictions=s.evictions,
        outcome=s.outcome,
        reward=s.reward,
        created_at=s.created_at,
    )


@router.post("/sessions", status_code=201, response_model=SessionOut)
def create_session(body: SessionIn, request: Request, db: SessionDep, principal=require("session", "write")):
    count = request.app.state.resources.gateway.count_tokens
    return _out(service.create(db, principal, body.budget_tokens, dict(body.working_context), count))


@router.get("/sessions/{session_id}", response_model=SessionOut)
def get_session(session_id: uuid.UUID, db: SessionDep, principal=require("session", "read")):
    return _out(service.get(db, principal, session_id))


@router.post("/sessions/{session_id}/messages", status_code=201, response_model=MessageOut)
def add_message(session_id: uuid.UUID, body: MessageIn, request: Request, db: SessionDep, principal=require("session", "write")):
    s = service.get(db, principal, session_id, for_update=True)
    m, evicted, pressure = service.add_message(db, principal, request.app.state.resources, s, body.role, body.content)
    return MessageOut(
        id=m.id,
        seq=m.seq,
        role=m.role,
        content=m.content,
        tokens=m.tokens,
        evicted=evicted,
        pressure=round(min(1.0, pressure), 4),
    )


@router.get("/sessions/{session_id}/context", response_model=SessionContextOut, response_model_exclude_unset=True)
def session_context(session_id: uuid.UUID, request: Request, db: SessionDep, principal=require("session", "read")):
    s = service.get(db, principal, session_id)
    record_read(db, principal, "session_context", "session", s.id)
    return service.main_context(db, s, request.app.state.resources.gateway.count_tokens)


@router.get("/tools", response_model=ToolList)
def list_tools(principal=require("session", "read")):
    return {"tools": tools.schemas()}


@router.post("/sessions/{session_id}/tools/{name}", response_model=ToolResult, response_model_exclude_unset=True)
def call_tool(
    session_id: uuid.UUID,
    name: str,
    request: Request,
    db: SessionDep,
    args: dict[str, Any] = Body(default_factory=dict),
    principal=require("session", "write"),
):
    s = service.get(db, principal, session_id, for_update=True)
    return tools.execute(db, principal, request.app.state.resources, s, name, args)


@router.post("/sessions/{session_id}/outcome", response_model=SessionOut)
def report_outcome(session_id: uuid.UUID, body: OutcomeIn, db: SessionDep, principal=require("session", "write")):
    s = service.get(db, principal, session_id, for_update=True)
    return _out(service.report_outcome(db, principal, s, body.outcome, body.reward))
