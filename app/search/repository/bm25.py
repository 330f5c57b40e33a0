"""BM25 with binary term frequency over one item type, N and df counted over the caller's
servable rows only (so another tenant's vocabulary never shapes a score)."""

from __future__ import annotations

from sqlalchemy import Integer, bindparam, func, select, true
from sqlalchemy.dialects.postgresql import ARRAY, TEXT, TSQUERY, aggregate_order_by
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.database.sql import as_text
from app.kit.registry import ITEM_TYPES
from app.search.repository import bm25_stats
from app.search.repository.filters import STATEMENTS, limit_param, servable, shape
from app.search.schemas import SearchFilters

MAX_QUERY_LEXEMES = 32
# Up to this many lexemes BM25 tests every visible row against each (cheap for a question's few
# words over many rows); beyond, it unnests the rows holding any (the second round's ~40-128
# words over a few hundred rows; docs/search.md).
PER_LEXEME_TESTS = 12


def visible_count(db: Session, principal: Principal, type_: str, f: SearchFilters) -> int:
    """How many rows of a type the caller may be served under these filters (BM25's N; hybrid's
    choice between the exact and the HNSW vector search)."""
    m = ITEM_TYPES[type_].model
    return STATEMENTS.run(
        db,
        ("count",) + shape(principal, type_, f),
        lambda: select(func.count()).select_from(m).where(*servable(principal, type_, f)),
    ).scalar_one()


def text_ids(
    db: Session, principal: Principal, type_: str, query: str, f: SearchFilters, n: int, *, total: int | None = None
) -> list[tuple]:
    """Rows matching ANY of the query's lexemes, ranked by the summed IDF of those they match
    (`text_scored` without N)."""
    return text_scored(db, principal, type_, query, f, n, total=total)[0]


def text_scored(
    db: Session,
    principal: Principal,
    type_: str,
    query: str,
    f: SearchFilters,
    n: int,
    *,
    total: int | None = None,
    exact: bool = False,
) -> tuple[list[tuple], int | None]:
    """(top-n (id, score), N): rows matching ANY of the query's lexemes, ranked by the summed IDF
    of those they match, and N, the caller's visible rows under `f` (None when the query has no
    lexeme: then nothing ran).

    A natural-language question ANDed term by term (websearch_to_tsquery) rarely matches one
    row, so text search would come back empty and hybrid search be vector-only. This is BM25 with
    binary term frequency: rare words ("pottery",
    "Sweden") outweigh names and common verbs. N and the document frequencies are counted over
    the caller's visible rows only, so other tenants' vocabulary never shapes the ranking. One
    statement, one pass over the visible rows for N and every lexeme's rows (`bm25_select`);
    `total`: N when the caller counted it already. Unless `exact`, where the statistics kept per visibility
    bucket count exactly the caller's servable rows, N and df come from them and the rows from
    the text index (app/search/repository/bm25_stats.py): the same scores, without the pass.
    """
    m = ITEM_TYPES[type_].model
    lexemes = query_lexemes(db, query)
    if not lexemes:
        return [], total
    if not exact and bm25_stats.served_by_stats(principal, type_, f):
        big_n, dfs = bm25_stats.caller_stats(db, principal, type_, lexemes)
        if big_n >= bm25_stats.KEPT_FROM:  # below, one pass over the few visible rows is cheaper
            quoted = {w: tsquery_lexeme(w) for w in lexemes}
            return bm25_stats.top_scored(db, principal, type_, f, quoted=quoted, n=n, big_n=big_n, dfs=dfs), big_n
        total = big_n
    many, counted = len(lexemes) > PER_LEXEME_TESTS, total is not None
    rows = STATEMENTS.run(
        db,
        ("bm25", many, counted) + shape(principal, type_, f),
        lambda: bm25_select(m, servable(principal, type_, f), many=many, counted=counted, with_n=True),
        bm25_values(lexemes, n, total=total),
    ).all()
    return [(r.id, r.r) for r in rows if r.id is not None], (rows[0].n if rows else total)


def query_lexemes(db: Session, query: str) -> list[str]:
    """The query's lexemes (english configuration), at most MAX_QUERY_LEXEMES; asked of the
    database once per session and query (a search over three item types asked three times)."""
    memo = db.info.setdefault("query_lexemes", {})
    if query not in memo:
        if len(memo) > 64:
            memo.clear()
        memo[query] = STATEMENTS.run(db, ("lexemes",), lambda: _LEXEMES, {"q": query}).scalars().all()[:MAX_QUERY_LEXEMES]
    return memo[query]


_LEXEMES = select(func.unnest(func.tsvector_to_array(func.to_tsvector("english", bindparam("q", type_=TEXT)))))


# One lexeme as tsquery input: quoted, so that nothing in it is read as an operator.
tsquery_lexeme = bm25_stats.tsquery_text


def bm25_values(lexemes: list[str], n: int, *, total: int | None = None, n_terms: int | None = None) -> dict:
    """The values a `bm25_select` statement runs with: the lexemes (each also as a quoted tsquery,
    and all of them ORed for the many-lexeme form), the top-n, N if counted already, and how many
    of the rarest lexemes to keep (`n_terms`)."""
    quoted = [tsquery_lexeme(w) for w in lexemes]
    out = {"bm25_lex": list(lexemes), "bm25_tsq": quoted, "bm25_n": n}
    if len(lexemes) > PER_LEXEME_TESTS:
        out["bm25_any"] = " | ".join(quoted)
    if total is not None:
        out["bm25_total"] = total
    if n_terms is not None:
        out["bm25_terms"] = n_terms
    return out


def bm25_select(
    m, conds: list, *, many: bool, min_df: int = 0, rarest: bool = False, counted: bool = False, with_n: bool = False
):
    """Top-n (id, summed IDF of the lexemes a row holds) among the rows of `m` under `conds`, in
    one statement and one pass over the visible rows: they are read once (id and tsvector), and
    give N (their count) and each lexeme's rows (its df: the count of its rows), rather than
    reading them twice (the count, then the rows holding any lexeme with all their lexemes
    unnested, which grows with the reader's matching rows). The lexemes, n and the rest are bound when it
    runs (`bm25_values`); `many`: more than PER_LEXEME_TESTS lexemes (another way to find their
    rows). `min_df`/`rarest`: keep only the `n_terms` rarest lexemes held by at least `min_df` rows
    (the second round's choice of words, app/search/repository/expansion.py); by default every
    lexeme counts. `counted`: N is bound (`total`), not counted. `with_n`: (n, id, r) rows, always
    at least one (id None when nothing matched), so the caller learns N from the same statement."""
    vis = select(m.id.label("id"), m.tsv.label("tsv")).where(*conds).cte("vis").prefix_with("MATERIALIZED")
    # Each lexeme's tsquery made once (in the CTE), not once per (lexeme, row) test of the join.
    terms = (
        select(
            func.unnest(bindparam("bm25_lex", type_=ARRAY(TEXT))).label("lex"),
            func.unnest(bindparam("bm25_tsq", type_=ARRAY(TEXT)).cast(ARRAY(TSQUERY))).label("q"),
        )
        .cte("terms")
        .prefix_with("MATERIALIZED")
    )
    if not many:  # a question: test each visible row against each lexeme
        pairs = select(terms.c.lex, vis.c.id).select_from(terms).join(vis, vis.c.tsv.op("@@")(terms.c.q))
    else:  # many lexemes (the second round's): unnest the rows that hold any, keep the query's
        any_term = bindparam("bm25_any", type_=TEXT).cast(TSQUERY)
        held = (
            select(vis.c.id, func.unnest(func.tsvector_to_array(vis.c.tsv)).label("lex"))
            .where(vis.c.tsv.op("@@")(any_term))
            .subquery("held")
        )
        pairs = select(terms.c.lex, held.c.id).select_from(terms).join(held, held.c.lex == terms.c.lex)
    pairs = pairs.cte("pairs").prefix_with("MATERIALIZED")
    df = (
        select(terms.c.lex, func.count(pairs.c.id).label("df"))
        .select_from(terms)
        .join(pairs, terms.c.lex == pairs.c.lex, isouter=not min_df)
        .group_by(terms.c.lex)
    )
    if min_df:
        df = df.having(func.count(pairs.c.id) >= min_df)
    df = df.cte("df")
    big_n = (
        select(func.count().label("n")).select_from(vis)
        if not counted
        else select(bindparam("bm25_total", type_=Integer).label("n"))
    )
    big_n = big_n.cte("big_n")
    w = func.ln(1 + (big_n.c.n - df.c.df + 0.5) / (df.c.df + 0.5))
    idf = select(df.c.lex, w.label("w")).select_from(df).join(big_n, true())
    if rarest:
        idf = idf.order_by(w.desc(), df.c.lex).limit(limit_param("bm25_terms"))
    idf = idf.cte("idf")
    # Summed in lexeme order: rows holding the same lexemes get bit-equal scores, so ties fall to
    # the id (in join order the float sums differed in the last bit and ordered ties at random).
    score = func.sum(aggregate_order_by(idf.c.w, idf.c.lex))
    top = (
        select(pairs.c.id, score.label("r"))
        .select_from(pairs)
        .join(idf, idf.c.lex == pairs.c.lex)
        .group_by(pairs.c.id)
        .order_by(score.desc(), pairs.c.id)
        .limit(limit_param("bm25_n"))
    )
    if not with_n:
        return top
    top = top.subquery("top")
    return (
        select(big_n.c.n, as_text(top.c.id).label("id"), top.c.r)
        .select_from(big_n)
        .outerjoin(top, true())
        .order_by(top.c.r.desc(), top.c.id)
    )
