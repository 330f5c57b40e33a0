"""The second retrieval round's query: rare terms of the first round's best hits (no LLM).

A turn that answers a question often shares no word with the question but does share rare words
with the turns that match it (the name of a place, a pet, a book). `expansion_ids` takes the
lexemes of the given hits that the query does not contain, keeps the `n_terms` rarest of those
that occur in at least one other visible row (a lexeme only the hit itself holds finds nothing
new), and ranks the visible rows by the summed IDF of those they hold, as `text_ids` does. N and
the document frequencies are counted over the caller's servable rows only.
"""

from __future__ import annotations

from sqlalchemy import func, literal, select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.registry import ITEM_TYPES
from app.kit.sql import among
from app.search.repository import MAX_QUERY_LEXEMES, _filters, bm25_select
from app.search.schemas import SearchFilters

MAX_HIT_LEXEMES = 4 * MAX_QUERY_LEXEMES  # bounds the OR-query of the df count (a turn has ~15)


def expansion_rows(db: Session, principal: Principal, type_: str, hit_ids: list, query: str, qvec,  # noqa: ANN001
                   f: SearchFilters, n_terms: int, n: int) -> list[tuple]:
    """Top-n (id, score, cosine distance to `qvec`, session_id) by the `n_terms` rarest lexemes
    of `hit_ids` not in `query` (see the module): the rows and what fusion needs of them, in the
    statement that finds them."""
    if not hit_ids or n_terms <= 0:
        return []
    m = ITEM_TYPES[type_].model
    conds = _filters(principal, type_, f)
    hit_lex = (select(func.unnest(func.tsvector_to_array(m.tsv)).label("lex"))
               .where(among(m.id, hit_ids), *conds).subquery())
    query_lex = select(func.unnest(func.tsvector_to_array(func.to_tsvector("english", query))))
    lexemes = db.execute(select(hit_lex.c.lex).distinct().where(hit_lex.c.lex.not_in(query_lex))
                         .order_by(hit_lex.c.lex).limit(MAX_HIT_LEXEMES)).scalars().all()
    if not lexemes:
        return []
    found = bm25_select(m, conds, lexemes, n, min_df=2, n_terms=n_terms).subquery()
    sess = m.session_id if type_ == "episode" else literal(None)
    return db.execute(select(found.c.id, found.c.r, m.embedding.cosine_distance(qvec).label("d"),
                             sess.label("session_id")).join(m, m.id == found.c.id)
                      .order_by(found.c.r.desc(), found.c.id)).all()
