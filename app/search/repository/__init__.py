"""Vector kNN and full-text queries over one item type, always under `visible_to`.

HNSW filters *after* its graph walk, so a restrictive ACL can make `WHERE visible ORDER BY
emb <=> q LIMIT k` come back short (NOTES.md). We plan it knowingly: a first pass lets the
planner use HNSW with a raised `hnsw.ef_search`; if it returns fewer than k rows we run the
exact filtered search (the `+ 0` in ORDER BY keeps HNSW out), which is cheap precisely when the
visible set is small. Statements are never prepared (see app.kit.db.make_engine).
"""

from __future__ import annotations

from sqlalchemy import Integer, bindparam, func, literal, select, text, true, tuple_, union_all
from sqlalchemy.dialects.postgresql import ARRAY, TEXT, TSQUERY, aggregate_order_by
from sqlalchemy.orm import Session, aliased

from app.auth.principal import Principal
from app.episodes.models import Episode
from app.kit.access import visible_to
from app.kit.registry import ITEM_TYPES
from app.kit.repository_view import memory_state
from app.kit.sql import StatementCache, among_bound, as_text
from app.knowledge.models import KnowledgeAsset
from app.search.schemas import SearchFilters


def _filters(principal: Principal, type_: str, f: SearchFilters, model=None) -> list:  # noqa: ANN001
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


def _of_kinds(principal: Principal, type_: str, m, kinds: list[str]):  # noqa: ANN001, ANN202
    """Rows of these kinds. A chunk's kind is its asset's (document, table_schema, glossary): the
    asset subquery names the org like every statement (on Citus it stays on the org's shard)."""
    if type_ != "chunk":
        return m.kind.in_(kinds)
    return m.asset_id.in_(select(KnowledgeAsset.id).where(KnowledgeAsset.org_id == principal.org_id,
                                                          KnowledgeAsset.kind.in_(kinds)))


def _instructed(principal: Principal, type_: str, f: SearchFilters, m) -> list:  # noqa: ANN001
    """The filters an instruction can set (issue 17). Each is ANDed with `visible_to` above, so
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


# The search path's statements, built once per caller and shape (app.kit.sql.StatementCache):
# every key that holds an access filter holds the whole principal; the values that change
# from call to call (the query's vector and lexemes, ids, limits) are bound when it runs.
STATEMENTS = StatementCache()


def _shape(principal: Principal, type_: str, f: SearchFilters) -> tuple:
    """What `_filters` bakes into a statement: the caller, the type and the filters."""
    return principal, type_, f.model_dump_json()


def _qvec(m):  # noqa: ANN001, ANN202
    """The query's embedding, bound when the statement runs."""
    return bindparam("qvec", type_=m.embedding.type)


def _limit(name: str):  # noqa: ANN202
    return bindparam(name, type_=Integer)


SCAN_MODES = ("auto", "ef", "relaxed", "strict", "exact")
MAX_SCAN_TUPLES = 20_000  # pgvector's default bound on an iterative walk (modes relaxed/strict)
AUTO_SCAN_TUPLES = 10_000  # auto: a walk this deep loses recall (0.81 at 20k); past it, the exact search


def vector_ids(db: Session, principal: Principal, type_: str, qvec, f: SearchFilters, n: int,
               ef_search: int, mode: str = "auto") -> tuple[list[tuple], bool]:
    """Top-n (id, distance) among visible rows; returns (rows, used_exact).

    Modes (bench/filtered_knn measures them side by side; docs/decisions.md has the figures):
    `exact` — the filtered exact search (`+ 0` keeps HNSW out); `ef` — one HNSW pass at
    `ef_search` with the planner free to choose (the old behaviour; under an ACL filter it mostly
    chose a full sort: 100k rows, p50 200-400 ms); `relaxed`/`strict` — pgvector 0.8's
    iterative index scan (`hnsw.iterative_scan`): the walk goes on until n visible rows are found
    or `hnsw.max_scan_tuples` is spent, sorting is disabled for the statement so that the planner
    takes the index (its row estimates for the ACL filter are ~200x low), and relaxed order is
    re-sorted here; `auto` — relaxed at `ef_search`, the walk bounded to AUTO_SCAN_TUPLES: a
    visible set too sparse to fill n rows within it (where a deeper walk loses recall: 0.81 at
    0.5 % visible, k = 100, 20k tuples) falls to the exact search, which is what such a small
    visible set wants. Whatever the mode, fewer than n rows is never returned as is: the exact search decides
    whether more visible rows exist.
    """
    m = ITEM_TYPES[type_].model

    def build(exact: bool):  # noqa: ANN202
        dist = m.embedding.cosine_distance(_qvec(m))
        return (select(as_text(m.id).label("id"), dist.label("d")).where(*_filters(principal, type_, f),
                                                                         m.embedding.is_not(None))
                .order_by(dist + 0 if exact else dist).limit(_limit("n")))

    key, values = ("vector",) + _shape(principal, type_, f), {"qvec": qvec, "n": n}
    if mode != "exact":
        db.execute(text(f"SET LOCAL hnsw.ef_search = {int(ef_search)}"))
        iterative = mode in ("relaxed", "strict", "auto")
        if iterative:
            tuples = AUTO_SCAN_TUPLES if mode == "auto" else MAX_SCAN_TUPLES
            db.execute(text(f"SET LOCAL hnsw.iterative_scan = {'strict' if mode == 'strict' else 'relaxed'}_order"))
            db.execute(text(f"SET LOCAL hnsw.max_scan_tuples = {int(tuples)}"))
            db.execute(text("SET LOCAL enable_sort = off"))
        rows = STATEMENTS.run(db, key + (False,), lambda: build(False), values).all()
        # Not in a `finally`: after a failed statement the transaction is aborted (its SET LOCALs
        # die with it), and a cleanup statement there would replace the connection error that the
        # replica reader falls back on with PendingRollbackError (a 500 while a replica stopped).
        if iterative:
            db.execute(text("SET LOCAL hnsw.iterative_scan = off"))
            db.execute(text("SET LOCAL enable_sort = on"))
            rows.sort(key=lambda r: r.d)
        if len(rows) >= n:
            return rows, False
    return STATEMENTS.run(db, key + (True,), lambda: build(True), values).all(), True


MAX_QUERY_LEXEMES = 32
# Up to this many lexemes BM25 tests every visible row against each (cheap for a question's few
# words over many rows); beyond, it unnests the rows holding any (the second round's ~40-128
# words over a few hundred rows: 15.6 vs 12.9 ms p50 on LoCoMo the other way round).
PER_LEXEME_TESTS = 12


def visible_count(db: Session, principal: Principal, type_: str, f: SearchFilters) -> int:
    """How many rows of a type the caller may be served under these filters (BM25's N; hybrid's
    choice between the exact and the HNSW vector search)."""
    m = ITEM_TYPES[type_].model
    return STATEMENTS.run(db, ("count",) + _shape(principal, type_, f),
                          lambda: select(func.count()).select_from(m).where(*_filters(principal, type_, f))).scalar_one()


def text_ids(db: Session, principal: Principal, type_: str, query: str, f: SearchFilters, n: int, *,
             total: int | None = None) -> list[tuple]:
    """Rows matching ANY of the query's lexemes, ranked by the summed IDF of those they match
    (`text_scored` without N)."""
    return text_scored(db, principal, type_, query, f, n, total=total)[0]


def text_scored(db: Session, principal: Principal, type_: str, query: str, f: SearchFilters, n: int, *,
                total: int | None = None) -> tuple[list[tuple], int | None]:
    """(top-n (id, score), N): rows matching ANY of the query's lexemes, ranked by the summed IDF
    of those they match, and N, the caller's visible rows under `f` (None when the query has no
    lexeme: then nothing ran).

    A natural-language question ANDed term by term (websearch_to_tsquery) rarely matches one
    row, so text search came back empty and hybrid search was vector-only in practice (LoCoMo
    bench: text recall@10 0.12). This is BM25 with binary term frequency: rare words ("pottery",
    "Sweden") outweigh names and common verbs. N and the document frequencies are counted over
    the caller's visible rows only, so other tenants' vocabulary never shapes the ranking. One
    statement, one pass over the visible rows for N and every lexeme's rows (`bm25_select`);
    `total`: N when the caller counted it already.
    """
    m = ITEM_TYPES[type_].model
    lexemes = query_lexemes(db, query)
    if not lexemes:
        return [], total
    many, counted = len(lexemes) > PER_LEXEME_TESTS, total is not None
    rows = STATEMENTS.run(db, ("bm25", many, counted) + _shape(principal, type_, f), lambda: bm25_select(
        m, _filters(principal, type_, f), many=many, counted=counted, with_n=True), bm25_values(lexemes, n, total=total)).all()
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


def _tsquery_lexeme(word: str) -> str:
    """One lexeme as tsquery input: quoted, so that nothing in it is read as an operator."""
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


# Made once: SQLAlchemy memoises an alias's adapted columns on the alias itself, so a fresh
# `aliased(Episode)` per call re-adapted every column the statement names (~10 ms of Python per
# neighbour lookup, three times what the server spent planning and running it).
_HIT, _NEAR = aliased(Episode, name="hit"), aliased(Episode, name="near")


def neighbour_ids(db: Session, principal: Principal, hit_ids: list) -> list[tuple]:
    """(neighbour id, hit id) for the servable episode just before and the one just after each hit
    in the same session (by occurred_at): the turns around a retrieved conversation turn."""
    if not hit_ids:
        return []
    rows = STATEMENTS.run(db, ("neighbours", principal), lambda: _neighbours_select(principal), {"hits": list(hit_ids)}).all()
    return [(r.prev, r.id) for r in rows if r.prev is not None] + [(r.next, r.id) for r in rows if r.next is not None]


def _neighbours_select(principal: Principal):  # noqa: ANN202
    """Per hit one row with both neighbours as scalar subqueries (an index probe each on
    (org, session, occurred_at, id)): one pass over the hits instead of a lateral join per side
    and their union, which planned in ~3 ms at LoCoMo scale (twelfth stop)."""
    hit, n = _HIT, _NEAR

    def side(before: bool):  # noqa: ANN202
        near = tuple_(n.occurred_at, n.id) < tuple_(hit.occurred_at, hit.id) if before else \
            tuple_(n.occurred_at, n.id) > tuple_(hit.occurred_at, hit.id)
        order = (n.occurred_at.desc(), n.id.desc()) if before else (n.occurred_at, n.id)
        return (select(as_text(n.id)).where(*_filters(principal, "episode", SearchFilters(), n), near,
                                            n.session_id == hit.session_id)
                .order_by(*order).limit(1).scalar_subquery())

    return (select(as_text(hit.id).label("id"), side(True).label("prev"), side(False).label("next"))
            .where(among_bound(hit.id, "hits"), hit.session_id.is_not(None), visible_to(principal, hit)))


def load(db: Session, principal: Principal, type_: str, ids: list) -> dict:
    if not ids:
        return {}
    m = ITEM_TYPES[type_].model

    def build():  # noqa: ANN202
        cols = [c for c in m.__table__.columns if c.name not in ("embedding", "tsv")]
        return select(*cols).where(among_bound(m.id, "ids"), visible_to(principal, m))

    rows = STATEMENTS.run(db, ("load", principal, type_), build, {"ids": list(ids)}).all()
    return {str(r.id): r for r in rows}


def exact_pool(db: Session, principal: Principal, type_: str, qvec, f: SearchFilters, n: int,
               also_ids: list) -> tuple[list[tuple], list[tuple]]:
    """The exact vector top-n (id, distance) among visible rows and the fusion pool's rows (id,
    distance, session_id, n_lex: `pool_rows`) of those and `also_ids` (the text hits), in one statement:
    where hybrid takes the exact search (few visible rows) it was two, with the same filters."""
    m = ITEM_TYPES[type_].model

    def build(also: bool):  # noqa: ANN202
        conds = _filters(principal, type_, f)
        dist = m.embedding.cosine_distance(_qvec(m))
        sess = m.session_id if type_ == "episode" else literal(None)
        cols = (as_text(m.id).label("id"), dist.label("d"), sess.label("session_id"), func.length(m.tsv).label("n_lex"))
        top = (select(*cols, literal(True).label("top")).where(*conds, m.embedding.is_not(None))
               .order_by(dist + 0).limit(_limit("n")))
        return top if not also else union_all(top, select(*cols, literal(False).label("top"))
                                              .where(among_bound(m.id, "also"), *conds))

    also = bool(also_ids)
    got = STATEMENTS.run(db, ("exact_pool", also) + _shape(principal, type_, f), lambda: build(also),
                         {"qvec": qvec, "n": n, **({"also": list(also_ids)} if also else {})}).all()
    vec = sorted(((r.id, r.d) for r in got if r.top), key=lambda x: x[1])
    pool = list({r.id: r for r in got}.values())
    return vec, pool


def pool_rows(db: Session, principal: Principal, type_: str, qvec, ids: list, f: SearchFilters) -> list[tuple]:
    """(id, cosine distance, session_id, n_lex: the row's lexeme count) of the fusion pool's rows, by
    primary key.

    Score fusion needs both scores of every candidate: a row found by text search alone gets its
    exact cosine here (at most a few hundred rows, fetched by id, so no HNSW walk), and episodes
    bring their session for the session signal. Same filters as the searches themselves. A row
    without an embedding comes back with distance NULL (the caller scores it as the pool's
    farthest) rather than dropping out of hybrid results.
    """
    if not ids:
        return []
    m = ITEM_TYPES[type_].model

    def build():  # noqa: ANN202
        sess = m.session_id if type_ == "episode" else literal(None)
        return (select(as_text(m.id).label("id"), m.embedding.cosine_distance(_qvec(m)).label("d"),
                       sess.label("session_id"), func.length(m.tsv).label("n_lex"))
                .where(among_bound(m.id, "ids"), *_filters(principal, type_, f)))

    return STATEMENTS.run(db, ("pool_rows",) + _shape(principal, type_, f), build, {"qvec": qvec, "ids": list(ids)}).all()


def bm25_values(lexemes: list[str], n: int, *, total: int | None = None, n_terms: int | None = None) -> dict:
    """The values a `bm25_select` statement runs with: the lexemes (each also as a quoted tsquery,
    and all of them ORed for the many-lexeme form), the top-n, N if counted already, and how many
    of the rarest lexemes to keep (`n_terms`)."""
    quoted = [_tsquery_lexeme(w) for w in lexemes]
    out = {"bm25_lex": list(lexemes), "bm25_tsq": quoted, "bm25_n": n}
    if len(lexemes) > PER_LEXEME_TESTS:
        out["bm25_any"] = " | ".join(quoted)
    if total is not None:
        out["bm25_total"] = total
    if n_terms is not None:
        out["bm25_terms"] = n_terms
    return out


def bm25_select(m, conds: list, *, many: bool, min_df: int = 0, rarest: bool = False,  # noqa: ANN001
                counted: bool = False, with_n: bool = False):  # noqa: ANN201
    """Top-n (id, summed IDF of the lexemes a row holds) among the rows of `m` under `conds`, in
    one statement and one pass over the visible rows: they are read once (id and tsvector), and
    give N (their count) and each lexeme's rows (its df: the count of its rows). The previous
    statement read them twice at an org with many visible rows (the count, then the rows holding
    any lexeme with all their lexemes unnested: ~1M pairs for a reader with 32,000 matching rows);
    bench.scale's largest org: docs/decisions.md. The lexemes, n and the rest are bound when it
    runs (`bm25_values`); `many`: more than PER_LEXEME_TESTS lexemes (another way to find their
    rows). `min_df`/`rarest`: keep only the `n_terms` rarest lexemes held by at least `min_df` rows
    (the second round's choice of words, app.search.repository_expansion); by default every
    lexeme counts. `counted`: N is bound (`total`), not counted. `with_n`: (n, id, r) rows, always
    at least one (id None when nothing matched), so the caller learns N from the same statement."""
    vis = select(m.id.label("id"), m.tsv.label("tsv")).where(*conds).cte("vis").prefix_with("MATERIALIZED")
    # Each lexeme's tsquery made once (in the CTE), not once per (lexeme, row) test of the join.
    terms = select(func.unnest(bindparam("bm25_lex", type_=ARRAY(TEXT))).label("lex"),
                   func.unnest(bindparam("bm25_tsq", type_=ARRAY(TEXT)).cast(ARRAY(TSQUERY))).label("q")
                   ).cte("terms").prefix_with("MATERIALIZED")
    if not many:  # a question: test each visible row against each lexeme
        pairs = select(terms.c.lex, vis.c.id).select_from(terms).join(vis, vis.c.tsv.op("@@")(terms.c.q))
    else:  # many lexemes (the second round's): unnest the rows that hold any, keep the query's
        any_term = bindparam("bm25_any", type_=TEXT).cast(TSQUERY)
        held = (select(vis.c.id, func.unnest(func.tsvector_to_array(vis.c.tsv)).label("lex"))
                .where(vis.c.tsv.op("@@")(any_term)).subquery("held"))
        pairs = select(terms.c.lex, held.c.id).select_from(terms).join(held, held.c.lex == terms.c.lex)
    pairs = pairs.cte("pairs").prefix_with("MATERIALIZED")
    df = (select(terms.c.lex, func.count(pairs.c.id).label("df")).select_from(terms)
          .join(pairs, terms.c.lex == pairs.c.lex, isouter=not min_df).group_by(terms.c.lex))
    if min_df:
        df = df.having(func.count(pairs.c.id) >= min_df)
    df = df.cte("df")
    big_n = select(func.count().label("n")).select_from(vis) if not counted else \
        select(bindparam("bm25_total", type_=Integer).label("n"))
    big_n = big_n.cte("big_n")
    w = func.ln(1 + (big_n.c.n - df.c.df + 0.5) / (df.c.df + 0.5))
    idf = select(df.c.lex, w.label("w")).select_from(df).join(big_n, true())
    if rarest:
        idf = idf.order_by(w.desc(), df.c.lex).limit(_limit("bm25_terms"))
    idf = idf.cte("idf")
    # Summed in lexeme order: rows holding the same lexemes get bit-equal scores, so ties fall to
    # the id (in join order the float sums differed in the last bit and ordered ties at random).
    score = func.sum(aggregate_order_by(idf.c.w, idf.c.lex))
    top = (select(pairs.c.id, score.label("r")).select_from(pairs).join(idf, idf.c.lex == pairs.c.lex)
           .group_by(pairs.c.id).order_by(score.desc(), pairs.c.id).limit(_limit("bm25_n")))
    if not with_n:
        return top
    top = top.subquery("top")
    return (select(big_n.c.n, as_text(top.c.id).label("id"), top.c.r).select_from(big_n).outerjoin(top, true())
            .order_by(top.c.r.desc(), top.c.id))
