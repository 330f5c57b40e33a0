"""A search or context request made ready to rank, once: the instruction read (the LLM reads it
only when `settings.instruction_llm` is on, without a pooled connection held meanwhile), the
memory view the request reads (`as_of`), and the query's embedding as one `QueryVector`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import partial

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.database.db import released
from app.kit.runtime.embedding import Pending, beside, vector
from app.search.instruction import apply
from app.search.instruction_llm import interpret_llm
from app.search.schemas import Interpreted, SearchFilters


class QueryVector:
    """The query's embedding, whatever produced it: computed beside the ranking's first
    statements (`embed_query`), given, or absent (text search). `get()` waits for it once."""

    __slots__ = ("_source", "_value")

    def __init__(self, source=None):
        self._source, self._value = source, None

    def get(self):
        if self._value is None and self._source is not None:
            self._value, self._source = vector(self._source), None
        return self._value


def as_query_vector(qvec) -> QueryVector:
    return qvec if isinstance(qvec, QueryVector) else QueryVector(qvec)


@dataclass(frozen=True)
class Prepared:
    """What a request ranks with: the caller at the request's view, the query and filters after
    its instruction, what the instruction was read as (None without one), the query vector."""

    principal: Principal
    query: str
    filters: SearchFilters
    interpreted: Interpreted | None
    qvec: QueryVector


def prepare(
    db: Session,
    principal: Principal,
    *,
    query: str,
    filters: SearchFilters,
    instruction: str | None,
    as_of: datetime | None,
    settings,
    resources,
    embed: bool = True,
) -> Prepared:
    """The request's ranking inputs (see the module). Relative times in the instruction ("last
    week") are read against an as-of read's instant, as they were meant then."""
    principal = principal.at(as_of)
    interpreted = None
    if instruction and settings.instruction_llm:  # no pooled connection held while the LLM reads it
        with released(db, principal):
            query, filters, interpreted = apply(
                instruction, query, filters, now=principal.view.as_of, interpreter=partial(interpret_llm, resources.gateway)
            )
    elif instruction:
        query, filters, interpreted = apply(instruction, query, filters, now=principal.view.as_of)
    qvec = QueryVector(_org_query_vector(db, principal, resources, query) if embed else None)
    return Prepared(principal=principal, query=query, filters=filters, interpreted=interpreted, qvec=qvec)


def _org_query_vector(db: Session, principal: Principal, resources, query: str):
    """The query embedded by the org's model, under the org's embedder lock in share mode. When it
    was embedded with the connection let go (the transaction, and the lock with it, ended), the
    model is read again: a re-embedding may have switched the org meanwhile."""
    embedder = resources.embedder_for(db, principal.org_id)
    vec = embed_query(db, principal, embedder, query)
    if isinstance(vec, Pending):  # computed beside this transaction, which kept the lock
        return vec
    now = resources.embedder_for(db, principal.org_id)
    return vec if now is embedder else now.embed_queries([query])[0]


def embed_query(db: Session, principal: Principal, embedder, query: str):
    """The query's embedding for a request's ranking. With the embedder idle it is computed beside
    the ranking's first statements (text search and the visible-row count need no vector) and
    the ranking waits for it where it needs it: the request keeps its connection for at most one
    query's embedding. With the embedder busy (other requests, a batch being embedded) the
    request waits for its turn without holding a pooled connection (`released`)."""
    pending = beside(embedder, query)
    if pending is not None:
        return pending
    with released(db, principal):
        return embedder.embed_queries([query])[0]
