"""Memory tools for agents (OpenAI function-calling schemas + one executor).

Long-term: memory_add, memory_update, memory_delete. Short-term: memory_retrieve,
context_summarize, context_filter (the six AgeMem operations); plus MemGPT's
working_context_replace, recall_search, archival_search; and browse (the knowledge tree). Every call accepts
`request_heartbeat` (the agent asks to be called again with the result) and is logged in the
session's trajectory, success or not.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.errors import AppError, NotFound
from app.kit.http.schemas import NumberOnly
from app.kit.items import CHUNK, MEMORY, SearchType
from app.memories import service as memories
from app.memories.models import AGENT_KINDS
from app.memories.schemas import AgentId, MemoryIn, MemoryKind, MemoryPatch
from app.search.prepare import Prepared, QueryVector
from app.search.schemas import SearchFilters, SearchIn
from app.search.service import search
from app.sessions import service as sessions
from app.sessions.models import AgentSession, ToolCall


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request_heartbeat: bool = False


class MemoryAddArgs(_Args):
    text: str = Field(min_length=1, max_length=20_000, description="the fact, rule, preference or procedure")
    kind: MemoryKind = "fact"
    confidence: Annotated[float, Field(ge=0, le=1), NumberOnly] = 0.8
    agent_id: AgentId | None = Field(
        default=None, description="with kinds instruction and skill (only): the agent whose private instruction or skill this is"
    )

    @model_validator(mode="after")
    def _agent_profile(self) -> MemoryAddArgs:
        """The rule of `MemoryIn`, checked here so that it answers 422 before the tool runs."""
        if (self.kind in AGENT_KINDS) != (self.agent_id is not None):
            raise ValueError("kinds 'instruction' and 'skill' belong to an agent: give agent_id with them (only)")
        return self


class MemoryUpdateArgs(_Args):
    id: uuid.UUID
    text: str | None = Field(default=None, min_length=1, max_length=20_000)
    kind: MemoryKind | None = None
    confidence: Annotated[float, Field(ge=0, le=1), NumberOnly] | None = None


class IdArgs(_Args):
    id: uuid.UUID


class QueryArgs(_Args):
    query: str = Field(min_length=1, max_length=2000)
    k: Annotated[int, Field(ge=1, le=50), NumberOnly] = 5


class ArchivalArgs(QueryArgs):
    types: list[SearchType] = Field(default_factory=lambda: [MEMORY, CHUNK])


class BrowseArgs(_Args):
    path: str | None = Field(
        default=None,
        max_length=2000,
        description="a node path from an earlier browse (e.g. warehouse/main/orders); omit for the top",
    )
    node_id: uuid.UUID | None = Field(default=None, description="a node id: its text, children and links")


class FilterArgs(_Args):
    message_ids: list[uuid.UUID] = Field(default_factory=list, max_length=500)
    contains: str | None = Field(default=None, min_length=1, max_length=200)


class ReplaceArgs(_Args):
    label: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\- ]+$")
    new: str = Field(max_length=4000)
    old: str | None = Field(default=None, max_length=4000, description="replace only this text inside the block")


def _ok(**kw) -> dict:
    return {"ok": True, **kw}


def _hits(results) -> list[dict]:
    return [{"type": r.type, "id": str(r.id), "text": r.text, "score": r.score} for r in results]


def t_memory_add(db, p, res, s, a: MemoryAddArgs):
    m = memories.create(
        db, res.embedder_for(db, p.org_id), p, MemoryIn(text=a.text, kind=a.kind, confidence=a.confidence, agent_id=a.agent_id)
    )  # private: any member may
    return _ok(id=str(m.id), version=m.version)


def t_memory_update(db, p, res, s, a: MemoryUpdateArgs):
    m = memories.patch(
        db,
        res.embedder_for(db, p.org_id),
        p,
        a.id,
        MemoryPatch(**a.model_dump(exclude={"id", "request_heartbeat"}, exclude_none=True)),
    )
    return _ok(id=str(m.id), version=m.version, previous=str(a.id))


def t_memory_delete(db, p, res, s, a: IdArgs):
    memories.delete(db, p, a.id)
    return _ok(deleted=str(a.id))


def _search(db, p, res, query: str, k: int, types: list[str], *, filters: SearchFilters | None = None):
    body = SearchIn(query=query, k=k, types=types, filters=filters or SearchFilters())
    # embedded here, in the tool call's transaction (it may hold the session's row lock)
    prepared = Prepared(
        principal=p,
        query=query,
        filters=body.filters,
        interpreted=None,
        qvec=QueryVector(res.embedder_for(db, p.org_id).embed_queries([query])[0]),
    )
    results, rid = search(db, prepared, body, ef_search=res.settings.hnsw_ef_search)
    return _ok(results=_hits(results), retrieval_id=str(rid))


def t_memory_retrieve(db, p, res, s, a: QueryArgs):
    return _search(db, p, res, a.query, a.k, ["memory"])


def t_recall_search(db, p, res, s, a: QueryArgs):
    """The session's own history: evicted messages live on as its episodes; live ones are matched too."""
    out = _search(db, p, res, a.query, a.k, ["episode"], filters=SearchFilters(session_id=str(s.id)))
    words = [w for w in a.query.lower().split() if len(w) > 2]
    live = [m for m in sessions.messages(db, s) if any(w in m.content.lower() for w in words)]
    out["messages"] = [{"id": str(m.id), "seq": m.seq, "role": m.role, "content": m.content} for m in live[: a.k]]
    return out


def t_archival_search(db, p, res, s, a: ArchivalArgs):
    return _search(db, p, res, a.query, a.k, a.types)


def t_browse(db, p, res, s, a: BrowseArgs):
    """The knowledge tree (catalog/schema/table/column, document/section, glossary/term) as text."""
    from app.knowledge import navigation

    if a.node_id is not None:
        n = navigation.node(db, p, a.node_id)
        return _ok(path=n["path"], text=navigation.render(n), children=n["children"], links=n["links"])
    return _ok(path=(a.path or "").strip("/"), text=navigation.browse(db, p, a.path))


def t_context_summarize(db, p, res, s, a: _Args):
    n = sessions.evict(db, p, res, s, reason="context_summarize")
    return _ok(evicted=n, summary=s.summary)


def t_context_filter(db, p, res, s, a: FilterArgs):
    if not a.message_ids and not a.contains:
        raise AppError("give message_ids or contains", code="validation_error", status_code=422)
    chosen = [
        m
        for m in sessions.messages(db, s)
        if m.id in set(a.message_ids) or (a.contains and a.contains.lower() in m.content.lower())
    ]
    n = sessions.evict(db, p, res, s, reason="context_filter", only=chosen) if chosen else 0
    return _ok(evicted=n)


def t_working_context_replace(db, p, res, s, a: ReplaceArgs):
    blocks = dict(s.working_context)
    if a.old is not None:
        if a.old not in blocks.get(a.label, ""):
            raise NotFound(f"text not found in block {a.label!r}")
        blocks[a.label] = blocks[a.label].replace(a.old, a.new, 1)
    else:
        blocks[a.label] = a.new
    if len(blocks) > 10:
        raise AppError("at most 10 working-context blocks", code="working_context_too_large", status_code=422)
    sessions.check_working_context(blocks, s.budget_tokens, res.gateway.count_tokens)
    s.working_context = blocks
    return _ok(label=a.label, text=blocks[a.label])


TOOLS = {
    "memory_add": (t_memory_add, MemoryAddArgs, "Store a long-term memory (fact, rule, preference, procedure)."),
    "memory_update": (t_memory_update, MemoryUpdateArgs, "Replace a memory with a new version (the old one is kept as history)."),
    "memory_delete": (t_memory_delete, IdArgs, "Delete a long-term memory you own."),
    "memory_retrieve": (t_memory_retrieve, QueryArgs, "Retrieve long-term memories relevant to a query."),
    "context_summarize": (t_context_summarize, _Args, "Fold the oldest half of the conversation into the summary."),
    "context_filter": (t_context_filter, FilterArgs, "Remove messages from the context (they stay searchable)."),
    "working_context_replace": (t_working_context_replace, ReplaceArgs, "Edit a labelled working-context block."),
    "recall_search": (t_recall_search, QueryArgs, "Search this session's earlier (evicted) conversation."),
    "archival_search": (t_archival_search, ArchivalArgs, "Search memories and organisational knowledge."),
    "browse": (
        t_browse,
        BrowseArgs,
        "Browse organisational knowledge as a tree: databases, tables, columns, "
        "documents, sections, glossary terms (omit path for the top level).",
    ),
}


def schemas() -> list[dict]:
    out = []
    for name, (_, model, desc) in TOOLS.items():
        params = model.model_json_schema()
        params.pop("title", None)
        out.append({"type": "function", "function": {"name": name, "description": desc, "parameters": params}})
    return out


def execute(db: Session, principal: Principal, resources, s: AgentSession, name: str, args: dict) -> dict:
    if name not in TOOLS:
        raise NotFound(f"no tool {name!r}")
    fn, model, _ = TOOLS[name]
    try:
        parsed = model.model_validate(args)
    except ValidationError as exc:
        e = exc.errors()[0]
        raise AppError(f"{'.'.join(map(str, e['loc']))}: {e['msg']}", code="validation_error", status_code=422) from None
    seq = sessions.next_tool_seq(db, s)
    try:
        with db.begin_nested():  # a failing tool leaves nothing half-done, but its call is still logged
            result = fn(db, principal, resources, s, parsed)
        status = "ok"
    except AppError as exc:
        result, status = {"ok": False, "error": {"code": exc.code, "message": exc.message}}, "error"
    result["heartbeat"] = parsed.request_heartbeat
    db.add(
        ToolCall(
            id=uuid.uuid4(),
            org_id=s.org_id,
            owner_id=s.owner_id,
            visibility=s.visibility,
            groups=s.groups,
            labels=s.labels,
            session_id=s.id,
            seq=seq,
            name=name,
            arguments=parsed.model_dump(mode="json"),
            result=_summary(result),
            status=status,
        )
    )
    db.flush()
    return result


def _summary(result: dict) -> dict:
    """What the trajectory keeps of a result: ids and scores, not the memory text."""
    keep = {k: v for k, v in result.items() if k not in ("results", "messages", "summary", "text", "children", "links")}
    if "children" in result:
        keep["children"] = [c["id"] for c in result["children"]]
    if "results" in result:
        keep["results"] = [{"type": r["type"], "id": r["id"], "score": r["score"]} for r in result["results"]]
    if "messages" in result:
        keep["messages"] = [m["id"] for m in result["messages"]]
    return keep


__all__ = ["TOOLS", "execute", "schemas"]
