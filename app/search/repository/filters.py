"""What a caller may be served of one item type (`servable`: `visible_to` and the request's
filters, ANDed), and the statement cache every search statement is kept in, keyed by that shape."""

from __future__ import annotations

from sqlalchemy import Integer, bindparam, func, literal, select
from sqlalchemy.dialects.postgresql import ARRAY, TEXT

from app.auth.principal import Principal
from app.kit.database.sql import StatementCache, as_text
from app.kit.registry import ITEM_TYPES
from app.kit.tenancy.access import visible_to
from app.kit.tenancy.repository_view import memory_state
from app.knowledge.models import KnowledgeAsset
from app.search.schemas import SearchFilters


def servable(principal: Principal, type_: str, f: SearchFilters, model=None) -> list:
    """What a caller may be served of one type (`model`: an alias of the type's table, if any)."""
    spec = ITEM_TYPES[type_]
    m = model if model is not None else spec.model
    conds = [visible_to(principal, m)]
    if type_ == "memory":  # the versions current then, in an as-of or branch view
        conds.append(memory_state(principal.view, m, f.status or ["active"]))
    if type_ == "episode":  # what distillation's judge flagged (injection-like) is never served as context
        conds.append(m.quality.is_distinct_from("quarantined"))
    if f.kinds:
        conds.append(_of_kinds(principal, type_, m, f.kinds))
    if f.labels:
        conds.append(m.labels.contains(f.labels))
    if f.since:
        conds.append(getattr(m, spec.time_col) >= f.since)
    if f.until:
        conds.append(getattr(m, spec.time_col) < f.until)
    if f.session_id is not None:
        if type_ != "episode":
            conds.append(literal(False))
        else:
            conds.append(m.session_id == f.session_id)
    return conds + _instructed(principal, type_, f, m)


def _of_kinds(principal: Principal, type_: str, m, kinds: list[str]):
    """Rows of these kinds. A chunk's kind is its asset's (document, table_schema, glossary): the
    asset subquery names the org like every statement (on Citus it stays on the org's shard)."""
    if type_ != "chunk":
        return m.kind.in_(kinds)
    return m.asset_id.in_(
        select(KnowledgeAsset.id).where(KnowledgeAsset.org_id == principal.org_id, KnowledgeAsset.kind.in_(kinds))
    )


def _instructed(principal: Principal, type_: str, f: SearchFilters, m) -> list:
    """The filters an instruction can set. Each is ANDed with `visible_to` above, so
    none can widen what the caller sees: at most they leave fewer rows."""
    conds = []
    if f.exclude_kinds:
        conds.append(~_of_kinds(principal, type_, m, f.exclude_kinds))
    if f.exclude_labels:
        conds.append(~m.labels.overlap(literal(list(f.exclude_labels), ARRAY(TEXT))))
    if f.owner == "me":
        conds.append(m.owner_id == principal.user_id)
    if f.visibility:
        conds.append(m.visibility.in_(f.visibility))
    if f.groups:
        conds.append(m.groups.overlap(literal(list(f.groups), ARRAY(TEXT))))
    if f.asset_kinds:  # knowledge only: memories and episodes are not assets
        conds.append(_of_kinds(principal, type_, m, f.asset_kinds) if type_ == "chunk" else literal(False))
    if f.status and type_ != "memory" and "active" not in f.status:
        conds.append(literal(False))  # only memories have versions
    if f.source:
        if type_ == "memory":
            conds.append(m.provenance["origin"].astext.in_(f.source))
        elif (type_ == "episode" and "api" not in f.source) or (type_ == "chunk" and "bootstrap" not in f.source):
            conds.append(literal(False))  # episodes come in through the API, chunks from bootstrap
    return conds


# The search path's statements, built once per caller and shape (app.kit.database.sql.StatementCache):
# every key that holds an access filter holds the whole principal; the values that change
# from call to call (the query's vector and lexemes, ids, limits) are bound when it runs.
STATEMENTS = StatementCache()


def shape(principal: Principal, type_: str, f: SearchFilters) -> tuple:
    """What `servable` bakes into a statement: the caller, the type and the filters."""
    return principal, type_, f.model_dump_json()


def qvec_param(m):
    """The query's embedding, bound when the statement runs."""
    return bindparam("qvec", type_=m.embedding.type)


def limit_param(name: str):
    return bindparam(name, type_=Integer)


# A speaker is 1 to 40 characters of a line before its first colon; longer text before a colon
# is a sentence, not a name.
SPEAKER = r"^([^:\n]{1,40}):"


def pool_columns(m, type_: str, *, content: bool = False) -> tuple:
    """The columns of a fusion pool's row, the same in every statement that brings rows into a
    pool: id (text), cosine distance to the query `d`, `session_id` (episodes), `n_lex` (the
    row's lexeme count) and `who` (an episode's speaker: the name before the first colon of its
    content, else NULL), read with the row rather than by a statement of their own. `content`:
    the content itself in place of `who`, for a statement that sorts many rows and keeps few
    (`with_speakers` then reads the speakers of the rows kept only)."""
    episode = type_ == "episode"
    if not episode:
        last = literal(None).label("content" if content else "who")
    else:
        last = m.content.label("content") if content else func.substring(m.content, SPEAKER).label("who")
    return (
        as_text(m.id).label("id"),
        m.embedding.cosine_distance(qvec_param(m)).label("d"),
        (m.session_id if episode else literal(None)).label("session_id"),
        func.length(m.tsv).label("n_lex"),
        last,
    )


def with_speakers(kept, type_: str):
    """The rows of `kept` (a subquery of `pool_columns(..., content=True)`), in its order, with
    `who` read from their content: the speaker of the rows kept, not of every row sorted."""
    who = func.substring(kept.c.content, SPEAKER) if type_ == "episode" else literal(None)
    return select(kept.c.id, kept.c.d, kept.c.session_id, kept.c.n_lex, who.label("who"))
