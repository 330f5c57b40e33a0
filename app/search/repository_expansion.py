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
from sqlalchemy.dialects.postgresql import ARRAY, TEXT, TSQUERY
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.registry import ITEM_TYPES
from app.search.repository import MAX_QUERY_LEXEMES, _filters, _tsquery_lexeme
from app.search.schemas import SearchFilters

MAX_HIT_LEXEMES = 4 * MAX_QUERY_LEXEMES  # bounds the OR-query of the df count (a turn has ~15)


def expansion_ids(db: Session, principal: Principal, type_: str, hit_ids: list, query: str, f: SearchFilters,
                  n_terms: int, n: int) -> list[tuple]:
    """Top-n (id, score) by the `n_terms` rarest lexemes of `hit_ids` not in `query` (see the module)."""
    if not hit_ids or n_terms <= 0:
        return []
    m = ITEM_TYPES[type_].model
    conds = _filters(principal, type_, f)
    hit_lex = (select(func.unnest(func.tsvector_to_array(m.tsv)).label("lex"))
               .where(m.id.in_(hit_ids), *conds).subquery())
    query_lex = select(func.unnest(func.tsvector_to_array(func.to_tsvector("english", query))))
    lexemes = db.execute(select(hit_lex.c.lex).distinct().where(hit_lex.c.lex.not_in(query_lex))
                         .order_by(hit_lex.c.lex).limit(MAX_HIT_LEXEMES)).scalars().all()
    if not lexemes:
        return []
    any_term = literal(" | ".join(_tsquery_lexeme(w) for w in lexemes)).cast(TSQUERY)
    cand = (select(m.id.label("id"), func.tsvector_to_array(m.tsv).label("lexs"))
            .where(*conds, m.tsv.op("@@")(any_term)).cte("cand").prefix_with("MATERIALIZED"))
    terms = select(func.unnest(literal(list(lexemes), ARRAY(TEXT))).label("lex")).cte("terms")
    df = (select(terms.c.lex, func.count(cand.c.id).label("df")).select_from(terms)
          .join(cand, terms.c.lex == func.any(cand.c.lexs)).group_by(terms.c.lex)
          .having(func.count(cand.c.id) >= 2).cte("df"))
    total = select(func.count()).select_from(m).where(*conds).scalar_subquery()
    w = func.ln(1 + (total - df.c.df + 0.5) / (df.c.df + 0.5))
    idf = select(df.c.lex, w.label("w")).order_by(w.desc(), df.c.lex).limit(n_terms).cte("idf")
    score = func.sum(idf.c.w)
    return db.execute(select(cand.c.id, score.label("r")).select_from(cand)
                      .join(idf, idf.c.lex == func.any(cand.c.lexs))
                      .group_by(cand.c.id).order_by(score.desc(), cand.c.id).limit(n)).all()
