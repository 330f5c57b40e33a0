"""The second retrieval round's query: rare terms of the first round's best hits (no LLM).

A turn that answers a question often shares no word with the question but does share rare words
with the turns that match it (the name of a place, a pet, a book). `expansion_ids` takes the
lexemes of the given hits that the query does not contain, keeps the `n_terms` rarest of those
that occur in at least one other visible row (a lexeme only the hit itself holds finds nothing
new), and ranks the visible rows by the summed IDF of those they hold, as `text_ids` does. N and
the document frequencies are counted over the caller's servable rows only: where the statistics
kept per visibility bucket serve the read (bm25_stats.served_by_stats, at least KEPT_FROM rows),
they give N and df and the text index gives the rows (bm25_stats.top_scored), with the same
words chosen and the same scores as the one-pass statement over every visible row.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import bindparam, func, literal, select
from sqlalchemy.dialects.postgresql import TEXT
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.database.sql import among_bound, as_text
from app.kit.registry import ITEM_TYPES
from app.search.repository import bm25_stats
from app.search.repository.bm25 import MAX_QUERY_LEXEMES, PER_LEXEME_TESTS, bm25_select, bm25_values
from app.search.repository.filters import STATEMENTS, qvec_param, servable, shape
from app.search.repository.vector import pool_rows
from app.search.schemas import SearchFilters

MAX_HIT_LEXEMES = 4 * MAX_QUERY_LEXEMES  # bounds the OR-query of the df count (a turn has ~15)
MIN_DF = 2  # a word only the hit itself holds finds nothing new


class Found(NamedTuple):
    """One row the second round found: its score and what fusion needs of it."""

    id: str
    r: float
    d: float | None
    session_id: str | None
    n_lex: int


def expansion_rows(
    db: Session, principal: Principal, type_: str, f: SearchFilters, *, hit_ids: list, query: str, qvec, n_terms: int, n: int
) -> list[tuple]:
    """Top-n (id, score, cosine distance to `qvec`, session_id) by the `n_terms` rarest lexemes
    of `hit_ids` not in `query` (see the module): the rows and what fusion needs of them, in the
    statement that finds them."""
    if not hit_ids or n_terms <= 0:
        return []
    m = ITEM_TYPES[type_].model
    key = shape(principal, type_, f)

    def words():
        hit_lex = (
            select(func.unnest(func.tsvector_to_array(m.tsv)).label("lex"))
            .where(among_bound(m.id, "hits"), *servable(principal, type_, f))
            .subquery()
        )
        query_lex = select(func.unnest(func.tsvector_to_array(func.to_tsvector("english", bindparam("q", type_=TEXT)))))
        return (
            select(hit_lex.c.lex).distinct().where(hit_lex.c.lex.not_in(query_lex)).order_by(hit_lex.c.lex).limit(MAX_HIT_LEXEMES)
        )

    lexemes = STATEMENTS.run(db, ("expansion_words",) + key, words, {"hits": list(hit_ids), "q": query}).scalars().all()
    if not lexemes:
        return []
    if bm25_stats.served_by_stats(principal, type_, f):
        big_n, dfs = bm25_stats.caller_stats(db, principal, type_, lexemes)
        if big_n >= bm25_stats.KEPT_FROM:  # below, the one pass over the few visible rows is cheaper
            return _kept(db, principal, type_, f, lexemes=lexemes, dfs=dfs, big_n=big_n, qvec=qvec, n_terms=n_terms, n=n)
    many = len(lexemes) > PER_LEXEME_TESTS

    def rows():
        found = bm25_select(m, servable(principal, type_, f), many=many, min_df=MIN_DF, rarest=True).subquery()
        sess = m.session_id if type_ == "episode" else literal(None)
        return (
            select(
                as_text(found.c.id).label("id"),
                found.c.r,
                m.embedding.cosine_distance(qvec_param(m)).label("d"),
                sess.label("session_id"),
                func.length(m.tsv).label("n_lex"),
            )
            .join(m, m.id == found.c.id)
            .order_by(found.c.r.desc(), found.c.id)
        )

    return STATEMENTS.run(
        db, ("expansion_rows", many) + key, rows, {"qvec": qvec, **bm25_values(lexemes, n, n_terms=n_terms)}
    ).all()


def _kept(
    db: Session,
    principal: Principal,
    type_: str,
    f: SearchFilters,
    *,
    lexemes: list,
    dfs: list,
    big_n: int,
    qvec,
    n_terms: int,
    n: int,
) -> list[Found]:
    """`expansion_rows` from the kept statistics: the `n_terms` rarest of `lexemes` (each one's
    caller df in `dfs`) held by at least MIN_DF rows, the rows holding them ranked by the summed
    IDF of those they hold, then their pool rows. The one-pass statement orders the words by IDF
    (falling with df, strictly) and then by the word: `lexemes` come sorted by the database, so a
    stable sort by df gives its order."""
    order = sorted(range(len(lexemes)), key=lambda i: dfs[i])  # stable: ties keep the database's word order
    chosen = [i for i in order if dfs[i] >= MIN_DF][:n_terms]
    if not chosen:
        return []
    quoted = {lexemes[i]: bm25_stats.tsquery_text(lexemes[i]) for i in chosen}
    top = bm25_stats.top_scored(db, principal, type_, f, quoted=quoted, n=n, big_n=big_n, dfs=[dfs[i] for i in chosen])
    if not top:
        return []
    rows = {r.id: r for r in pool_rows(db, principal, type_, qvec, [i for i, _ in top], f)}
    return [Found(i, r, rows[i].d, rows[i].session_id, rows[i].n_lex) for i, r in top if i in rows]
