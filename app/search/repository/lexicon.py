"""Statements over the org's vocabulary (`lexicon`) and the vocabulary lift's rows."""

from __future__ import annotations

import uuid

from sqlalchemy import Float, Integer, all_, bindparam, func, null, select, text, union_all
from sqlalchemy.dialects.postgresql import ARRAY, TEXT, TSQUERY, aggregate_order_by, insert
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.episodes.models import Episode
from app.kit.database.sql import among_bound, as_text
from app.kit.database.vectors import PackedVector
from app.search.models import Bm25Posting, Lexeme
from app.search.repository import bm25_stats
from app.search.repository.bm25 import tsquery_lexeme
from app.search.repository.filters import STATEMENTS, pool_columns, qvec_param, servable, shape
from app.search.schemas import SearchFilters

# Each distinct word's english lexemes; a word that gives exactly one is a vocabulary word. The
# lexemes the org's vocabulary already holds come back marked, so only new ones are embedded.
_WORD_LEXEMES = text("""
SELECT w.word, x.lexeme, EXISTS (SELECT 1 FROM lexicon l WHERE l.org_id = :org AND l.lexeme = x.lexeme) AS known
FROM unnest(CAST(:words AS text[])) AS w(word)
CROSS JOIN LATERAL (SELECT tsvector_to_array(to_tsvector('english', w.word)) AS lx) a
CROSS JOIN LATERAL (SELECT a.lx[1] AS lexeme) x
WHERE cardinality(a.lx) = 1""")


def word_lexemes(db: Session, org_id: uuid.UUID, words: list[str]) -> list[tuple[str, str, bool]]:
    """(word, its lexeme, already in the org's vocabulary) for each word with one lexeme."""
    if not words:
        return []
    return [(r.word, r.lexeme, r.known) for r in db.execute(_WORD_LEXEMES, {"org": org_id, "words": list(words)})]


def add(db: Session, org_id: uuid.UUID, entries: list[tuple[str, str]], vectors) -> None:
    """(lexeme, word) entries with their embeddings; a lexeme another request added meanwhile is
    kept as it is."""
    if not entries:
        return
    rows = [{"org_id": org_id, "lexeme": lex, "word": word, "packed": v} for (lex, word), v in zip(entries, vectors)]
    db.execute(_ADD, rows)


# One statement compiled once (executemany, sent as multi-row VALUES), the embedding in pgvector's
# binary form (app/kit/database/vectors.py) rather than printed as text.
_ADD = (
    insert(Lexeme.__table__)
    .values(embedding=bindparam("packed", type_=PackedVector()))
    .on_conflict_do_nothing(index_elements=["org_id", "lexeme"])
)


def lexemes_of(db: Session, org_id: uuid.UUID, episode_id: uuid.UUID) -> list[str]:
    """The lexemes one episode holds (read before it is deleted)."""
    return list(
        db.execute(
            select(func.unnest(func.tsvector_to_array(Episode.tsv))).where(Episode.org_id == org_id, Episode.id == episode_id)
        ).scalars()
    )


_FORGET_UNHELD = text("""
DELETE FROM lexicon l WHERE l.org_id = :org AND l.lexeme = ANY(CAST(:lexemes AS text[]))
  AND NOT EXISTS (SELECT 1 FROM episodes e WHERE e.org_id = :org
                  AND e.tsv @@ CAST(quote_literal(l.lexeme) AS tsquery))""")


def forget_unheld(db: Session, org_id: uuid.UUID, lexemes: list[str]) -> int:
    """Remove those of `lexemes` that no episode of the org holds any more (in any branch, under
    any scope: the caller widens it); how many went."""
    if not lexemes:
        return 0
    return db.execute(_FORGET_UNHELD, {"org": org_id, "lexemes": sorted(set(lexemes))}).rowcount


def lift_rows(
    db: Session,
    principal: Principal,
    f: SearchFilters,
    *,
    qvec,
    own: list[str],
    pool: list,
    total: int,
    terms: int,
    min_sim: float,
    n: int,
    depth: int | None = None,
) -> list:
    """The vocabulary lift over the caller's servable episodes (app/search/lexicon.py): of the
    lexemes the `pool`'s rows hold (and the query does not), the `terms` whose words lie nearest
    to `qvec` (cosine above `min_sim`), and the servable rows holding any, scored by the summed
    similarity x IDF of the words they hold (df over the caller's rows, N = `total`, as BM25
    counts them): top-n (id, d, session_id, n_lex, who: `filters.pool_columns`; r). The pool bounds the candidates (as good
    as every word of the caller's rows, docs/search.md), at a cost that does not grow with their
    number. `depth`: only the first `depth` rows (those that may join the pool) carry their pool
    columns, the others id and r alone (the rest NULL: the caller reads only their scores).

    The words first; with no word near enough nothing else is run. Their rows then come from the
    postings of the caller's buckets (`bm25_stats`: the statistics count exactly this read's
    rows), no item row read but the `depth` best's, loaded under `servable`. Reads the postings
    do not serve (branch, as-of, filters below a bucket) take `lift_hits_select`, which reads the
    item table."""
    words = STATEMENTS.run(
        db,
        ("lift_words",) + shape(principal, "episode", f),
        lambda: _lift_words(principal, f),
        {"qvec": qvec, "own": list(own), "pool": list(pool), "terms": terms, "min_sim": min_sim},
    ).all()
    if not words:
        return []
    values = {"lexes": [w.lex for w in words], "sims": [float(w.sim) for w in words], "total": total, "n": n}
    if bm25_stats.served_by_stats(principal, "episode", f):
        odd = bm25_stats.saw_odd(db, principal, "episode")
        return STATEMENTS.run(
            db,
            ("lift_postings", odd) + shape(principal, "episode", f),
            lambda: _lift_postings(principal, f, odd=odd),
            {**values, "qvec": qvec, "depth": n if depth is None else depth},
        ).all()
    quoted = [tsquery_lexeme(w.lex) for w in words]
    return STATEMENTS.run(
        db,
        ("lift_hits",) + shape(principal, "episode", f),
        lambda: lift_hits_select(principal, f),
        {**values, "qvec": qvec, "tsq": quoted, "any": " | ".join(quoted)},
    ).all()


def _lift_words(principal: Principal, f: SearchFilters):
    """(lex, sim): the `terms` lexemes of the pooled rows nearest to the query, above `min_sim`."""
    m = Episode
    conds = servable(principal, "episode", f)
    pooled = (
        select(func.unnest(func.tsvector_to_array(m.tsv)).label("lex"))
        .distinct()
        .where(among_bound(m.id, "pool"), *conds)
        .cte("pooled")
        .prefix_with("MATERIALIZED")
    )
    dist = Lexeme.embedding.cosine_distance(qvec_param(Lexeme))
    near = (
        select(Lexeme.lexeme.label("lex"), (1 - dist).label("sim"))
        .where(
            Lexeme.org_id == principal.org_id,
            Lexeme.lexeme.in_(select(pooled.c.lex)),
            Lexeme.lexeme != all_(bindparam("own", type_=ARRAY(TEXT))),
        )
        .order_by(dist, Lexeme.lexeme)
        .limit(bindparam("terms", type_=Integer))
        .subquery("near")
    )
    return select(near.c.lex, near.c.sim).where(near.c.sim > bindparam("min_sim", type_=Float)).order_by(near.c.lex)


def lift_hits_select(principal: Principal, f: SearchFilters):
    """The servable rows holding any of the chosen lexemes, scored (see lift_rows), read from the
    item table by its text index: the statement for reads the postings do not serve, and the
    reference the postings' statement is tested against."""
    m = Episode
    conds = servable(principal, "episode", f)
    chosen = (
        select(
            func.unnest(bindparam("lexes", type_=ARRAY(TEXT))).label("lex"),
            func.unnest(bindparam("sims", type_=ARRAY(Float))).label("sim"),
            func.unnest(bindparam("tsq", type_=ARRAY(TEXT)).cast(ARRAY(TSQUERY))).label("q"),
        )
        .cte("chosen")
        .prefix_with("MATERIALIZED")
    )
    hits = (
        select(m.id.label("id"), chosen.c.lex, chosen.c.sim)
        .select_from(m)
        .join(chosen, m.tsv.op("@@")(chosen.c.q))
        .where(m.tsv.op("@@")(bindparam("any", type_=TEXT).cast(TSQUERY)), *conds)
        .cte("hits")
        .prefix_with("MATERIALIZED")
    )
    scored = _scored(hits).subquery("scored")
    return (
        select(*pool_columns(m, "episode"), scored.c.r)
        .select_from(scored)
        .join(m, (m.org_id == principal.org_id) & (m.id == scored.c.id))
        .order_by(scored.c.r.desc(), scored.c.id)
    )


def _scored(hits):
    """Top-n (id, r) of `hits` (id, lex, sim: one row per row and chosen lexeme it holds): df per
    lexeme over them, N bound, each row's similarity x IDF summed in lexeme order (bit-equal ties,
    the same sum whichever statement found the rows)."""
    df = select(hits.c.lex, func.count().label("df")).group_by(hits.c.lex).cte("hdf")
    big_n = bindparam("total", type_=Integer)
    w = hits.c.sim * func.ln(1 + (big_n - df.c.df + 0.5) / (df.c.df + 0.5))
    score = func.sum(aggregate_order_by(w, hits.c.lex))
    return (
        select(hits.c.id, score.label("r"))
        .select_from(hits)
        .join(df, df.c.lex == hits.c.lex)
        .group_by(hits.c.id)
        .order_by(score.desc(), hits.c.id)
        .limit(bindparam("n", type_=Integer))
    )


def _lift_postings(principal: Principal, f: SearchFilters, *, odd: bool):
    """The lift's top-n from the postings of the caller's buckets (`bm25_stats.visible_bids`;
    with `odd`, the owner's copies too): index-only, every posted row a servable one. The first
    `depth` rows are joined to the item table under `servable` for their pool columns; the
    others come with id and r only."""
    m, p = Episode, Bm25Posting
    lexes = bindparam("lexes", type_=ARRAY(TEXT))
    sim = bm25_stats.element(bindparam("sims", type_=ARRAY(Float)), bm25_stats.place_of(lexes, p.lexeme), Float)
    hits = (
        select(p.id.label("id"), p.lexeme.label("lex"), sim.label("sim"))
        .where(bm25_stats.in_buckets(principal, bm25_stats.visible_bids(principal, "episode", odd=odd), lexes))
        .cte("hits")
        .prefix_with("MATERIALIZED")
    )
    top = _scored(hits).subquery("top")
    place = func.row_number().over(order_by=(top.c.r.desc(), top.c.id)).label("place")
    ranked = select(top.c.id, top.c.r, place).cte("ranked").prefix_with("MATERIALIZED")
    deep = bindparam("depth", type_=Integer)
    loaded = (
        select(*pool_columns(m, "episode"), ranked.c.r, ranked.c.id.label("uid"))
        .select_from(ranked)
        .join(m, (m.org_id == principal.org_id) & (m.id == ranked.c.id))
        .where(ranked.c.place <= deep, *servable(principal, "episode", f))
    )
    rest = select(
        as_text(ranked.c.id).label("id"),
        null().label("d"),
        null().label("session_id"),
        null().label("n_lex"),
        null().label("who"),
        ranked.c.r,
        ranked.c.id.label("uid"),
    ).where(ranked.c.place > deep)
    both = union_all(loaded, rest).subquery("both")
    return select(both.c.id, both.c.d, both.c.session_id, both.c.n_lex, both.c.who, both.c.r).order_by(
        both.c.r.desc(), both.c.uid
    )
