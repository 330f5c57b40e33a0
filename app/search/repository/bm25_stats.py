"""BM25 from the statistics kept per visibility bucket (migration 0024), with index-driven top-n.

A caller's N and df are the sums over the buckets `visible_to` lets them see (bm25_buckets,
bm25_df): exactly the counts over their servable rows, read in a few index lookups instead of a
pass over every visible row. The rows to score come from the postings of those buckets
(bm25_postings, migration 0033: one row per bucket, lexeme and item row), scored with the same
expression as the exact statement (app/search/repository/bm25.py), so every score is bit-equal to
the exact path's; no item row is read.

MaxScore pruning, safe, in the same statement: the postings of the rarest lexemes (up to
FIRST_ROWS rows by their df) give `theta`, a lower bound of the true n-th score. The commonest
lexemes whose idf sum stays below theta are non-essential: a row holding only those scores below
theta and cannot enter the top n, so only rows holding an essential lexeme are candidates, and
the non-essential lexemes are only probed for them (every candidate is still scored with every
lexeme it holds). Where the rarest lexemes hold fewer than n rows there is no theta, and where the
query's lexemes hold at most FLAT_UP_TO postings for the caller MaxScore's steps cost more than
they save: one aggregate over every query lexeme's postings.

The statistics serve main-branch reads now with default filters (`served_by_stats`); branch and
as-of reads, and filters that cut below a bucket (kinds, labels, times, session, owner, source,
...) keep the exact statement. An owner's shared rows that no shared bucket gives them (a group
they left or were never in, a label they are not cleared for; `bm25_owned` says how many) are
counted from the item table, a few of the caller's own rows, and their postings are read from
the owner's copies of those buckets.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from sqlalchemy import (
    BigInteger,
    Float,
    Integer,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    or_,
    select,
    true,
    type_coerce,
    union,
)
from sqlalchemy.dialects.postgresql import ARRAY, TEXT, TSQUERY, aggregate_order_by
from sqlalchemy.orm import Session, aliased

from app.auth.principal import Principal
from app.kit.database.sql import as_text
from app.kit.items import SEARCH_TYPES
from app.kit.registry import ITEM_TYPES
from app.kit.tenancy.access import visible_to
from app.search.models import Bm25Bucket, Bm25BucketId, Bm25Df, Bm25Owned, Bm25Posting
from app.search.repository.filters import STATEMENTS, servable, shape
from app.search.schemas import SearchFilters

KEPT = SEARCH_TYPES  # the types whose statistics the triggers keep (migration 0024: one per searched type)
# Below this many visible rows the exact statement (one pass over them, N bound from the kept
# statistics) is cheaper than the kept path's statements (docs/search.md).
KEPT_FROM = 1_000
FIRST_ROWS = 2000  # theta comes from the rarest lexemes' postings, up to about this many
# MaxScore's steps (theta, candidates, probes) pay only where the query's lexemes hold many
# postings: up to this many (the caller's df summed over the query's lexemes) one aggregate over
# all of them is cheaper. Where the two cost the same at bench/speed/scale's 200k org; measured
# per query at four orgs and checked on a fifth (docs/search.md, "MaxScore only where it pays").
FLAT_UP_TO = 25_000
_SLACK = 1e-9  # the bounds are float sums in another order than the scores': never prune on a last bit
_NOBODY = uuid.UUID(int=0)  # a user id no row has: visible_to for it is "shared with and cleared"


def served_by_stats(principal: Principal, type_: str, f: SearchFilters) -> bool:
    """Whether the kept statistics count exactly this read's servable rows: main now, a kept
    type, no filter beyond the default (memories: active)."""
    rest = f.model_copy(update={"status": None}) if f.status == ["active"] else f
    return principal.view.is_plain and type_ in KEPT and rest == SearchFilters()


def caller_stats(db: Session, principal: Principal, type_: str, lexemes: list[str]) -> tuple[int, list[int]]:
    """(N, each lexeme's df) over the caller's servable rows of `type_` under the default filters:
    the sums over the buckets they may see, plus their own shared rows that no shared bucket gives
    them (a group they left, a label they are not cleared for), counted from the item table (a
    few of their own rows, found by `bm25_owned`)."""
    row = STATEMENTS.run(
        db,
        ("bm25_stats",) + shape(principal, type_, SearchFilters()),
        lambda: _stats_select(principal, type_),
        {"lex": list(lexemes)},
    ).one()
    big_n, dfs = int(row.n or 0), [int(d) for d in row.df or ()]  # no lexeme: NULL
    db.info.setdefault("bm25_odd", {})[(str(principal.user_id), type_)] = bool(row.odd)  # top_scored's shape
    if row.odd:
        extra = STATEMENTS.run(
            db,
            ("bm25_odd",) + shape(principal, type_, SearchFilters()),
            lambda: _odd_select(principal, type_),
            {"lex": list(lexemes), "tsq": [tsquery_text(w) for w in lexemes]},
        ).one()
        big_n, dfs = big_n + int(row.odd), [d + int(e) for d, e in zip(dfs, extra.df or ())]
    return big_n, dfs


def tsquery_text(word: str) -> str:
    """One lexeme as tsquery input: quoted, so that nothing in it is read as an operator."""
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


def _lexemes():
    return func.unnest(bindparam("lex", type_=ARRAY(TEXT))).table_valued("lex", with_ordinality="i").render_derived("t")


def _stats_select(principal: Principal, type_: str):
    b, d, o = Bm25Bucket, Bm25Df, Bm25Owned
    mine = and_(b.org_id == principal.org_id, b.item_type == type_)
    vb = (
        select(b.bucket, func.sum(b.n).label("n"))
        .where(mine, visible_to(principal, b))
        .group_by(b.bucket)
        .cte("vb")
        .prefix_with("MATERIALIZED")
    )
    t = _lexemes()
    # Each lexeme's df: one probe of the primary key per lexeme, every condition in the index
    # (the buckets as an array): a join here was planned on the table's row estimates, and where
    # they were stale (an org's first rows of a type) it read all of the org's lexemes of the type.
    buckets = func.array(select(vb.c.bucket).scalar_subquery())
    one_df = select(func.coalesce(func.sum(d.df), 0)).where(
        d.org_id == principal.org_id, d.item_type == type_, d.bucket == func.any(buckets), d.lexeme == t.c.lex
    )
    dfs = select(t.c.i, one_df.scalar_subquery().label("df")).select_from(t).subquery("dfs")
    shared_to_me = visible_to(replace(principal, user_id=_NOBODY), o)  # shared with the caller and cleared
    odd = select(func.coalesce(func.sum(o.n), 0)).where(
        o.org_id == principal.org_id, o.item_type == type_, o.owner_id == principal.user_id, ~shared_to_me
    )
    return select(
        select(func.sum(vb.c.n)).scalar_subquery().label("n"),
        select(func.array_agg(aggregate_order_by(dfs.c.df, dfs.c.i))).scalar_subquery().label("df"),
        odd.scalar_subquery().label("odd"),
    )


def _odd_select(principal: Principal, type_: str):
    """Each lexeme's rows among the caller's own shared rows that no shared bucket gives them."""
    m = ITEM_TYPES[type_].model
    own = (
        select(m.tsv.label("tsv"))
        .where(
            *servable(principal, type_, SearchFilters()),
            m.owner_id == principal.user_id,
            m.visibility != "private",
            ~visible_to(replace(principal, user_id=_NOBODY), m),
        )
        .cte("own")
        .prefix_with("MATERIALIZED")
    )
    t = (
        func.unnest(bindparam("lex", type_=ARRAY(TEXT)), bindparam("tsq", type_=ARRAY(TEXT)).cast(ARRAY(TSQUERY)))
        .table_valued("lex", "q", with_ordinality="i")
        .render_derived("t")
    )
    per = (
        select(t.c.i, select(func.count()).select_from(own).where(own.c.tsv.op("@@")(t.c.q)).scalar_subquery().label("df"))
        .select_from(t)
        .subquery("per")
    )
    return select(func.array_agg(aggregate_order_by(per.c.df, per.c.i)).label("df"))


def top_scored(
    db: Session,
    principal: Principal,
    type_: str,
    f: SearchFilters,
    *,
    quoted: dict[str, str],
    n: int,
    big_n: int,
    dfs: list[int],
    essential: list | None = None,
) -> list[tuple]:
    """Top-n (id, score) among the caller's servable rows holding any of the lexemes (`quoted`'s
    keys, in the order of `dfs`; its values, their tsquery texts, serve the exact path), given the
    caller's N and each lexeme's df: one statement over the postings of the caller's buckets,
    MaxScore-pruned (see the module).
    `essential`: a list to append (essential lexemes, lexemes held) to, when rows came back."""
    held = sorted((df, lex) for lex, df in zip(quoted, dfs) if df > 0)
    if not held or n <= 0:
        return []
    first, first_rows = 0, 0
    for df, _ in held:  # the rarest lexemes, up to about FIRST_ROWS rows: their postings give theta
        if first and first_rows + df > FIRST_ROWS:
            break
        first, first_rows = first + 1, first_rows + df
    values = {
        "s_lex": [lex for _, lex in held],
        "s_df": [df for df, _ in held],
        "s_ord": list(range(len(held))),
        "s_n": big_n,
        "s_top": n,
        "s_skip": n - 1,
        "s_first": [lex for _, lex in held[:first]],
    }
    odd = saw_odd(db, principal, type_)
    # no theta where the first lexemes hold fewer than n rows; no pruning worth its steps below FLAT_UP_TO
    pruned = first_rows >= n and sum(df for df, _ in held) > FLAT_UP_TO
    if not pruned:
        values = {k: v for k, v in values.items() if k not in ("s_skip", "s_first")}
    rows = STATEMENTS.run(
        db,
        ("bm25_top", odd, pruned) + shape(principal, type_, f),
        lambda: _top_select(principal, type_, odd=odd, pruned=pruned),
        values,
    ).all()
    if essential is not None and rows:
        essential.append((rows[0].e, len(held)))
    return [(r.id, r.r) for r in rows]


def saw_odd(db: Session, principal: Principal, type_: str) -> bool:
    """Whether `caller_stats` saw the caller own shared rows of `type_` that no visible bucket
    gives them, in this session (not asked yet: True, so that their postings are read)."""
    return db.info.get("bm25_odd", {}).get((str(principal.user_id), type_), True)


def visible_bids(principal: Principal, type_: str, *, odd: bool):
    """The ids of the caller's buckets of `type_` whose postings are their servable rows, as one
    array read once (a one-row MATERIALIZED CTE): the buckets `visible_to` gives them (the rule that
    counts their N) and, with `odd`, the owner's copies of the buckets holding their own rows that
    it does not."""
    b, i = Bm25Bucket, Bm25BucketId
    bids = (
        select(i.bid)
        .join(b, and_(b.org_id == i.org_id, b.item_type == i.item_type, b.bucket == i.bucket))
        .where(i.org_id == principal.org_id, i.item_type == type_, visible_to(principal, b))
        .distinct()
    )
    if odd:
        bids = union(bids, _odd_bids(principal, type_))
    vb = select(func.array(bids.scalar_subquery()).label("a")).cte("vb").prefix_with("MATERIALIZED")
    return cast(select(vb.c.a).scalar_subquery(), ARRAY(Integer))


def in_buckets(principal: Principal, bids, lexemes):
    """The condition that a posting (`Bm25Posting`) is of one of `lexemes` and of one of `bids`
    (`visible_bids`), both arrays given to the index (bid = ANY, lexeme = ANY). Callers take a
    posting's place among the lexemes with `place_of`, not by a join to a lexeme CTE, which
    PostgreSQL planned as a nested loop filtering every posting of the caller's buckets once per
    lexeme (its row estimates for a CTE and for an array of unknown length are guesses)."""
    p = Bm25Posting
    return and_(p.org_id == principal.org_id, p.bid == func.any(bids), p.lexeme == func.any(lexemes))


def place_of(lexemes, lexeme):
    """A lexeme's place in an array of lexemes, from 1 (`array_position`)."""
    return func.array_position(lexemes, lexeme)


def element(array, place, type_):
    """`array[place]`, the array read once (a scalar subquery: PostgreSQL takes no subscript
    after a cast or a typed parameter)."""
    return type_coerce(select(array).scalar_subquery(), ARRAY(type_))[place]


def _bit(ord_):
    return literal(1, BigInteger).op("<<")(ord_)


def _top_select(principal: Principal, type_: str, *, odd: bool, pruned: bool):
    """The caller's servable rows holding any lexeme of `s_lex` (ordered by df), each scored with
    the summed idf of every query lexeme it holds; idf from the bound N and df, by the exact
    statement's expression. A row's lexemes are a bit mask (bit = the lexeme's place in `s_lex`);
    a mask's score is its lexemes' idf summed in lexeme order, once per distinct mask (bit-equal
    to the exact statement's sum per row).

    MaxScore: theta1, the n-th best partial score over the postings of the first `s_first`
    (rarest) lexemes, bounds the n-th score from below; the commonest lexemes whose idf sum stays
    below it are non-essential (a row holding only those cannot enter). The essential lexemes'
    postings give the candidates and their partial masks; theta2 (the n-th best of those) and the
    non-essential idf sum drop the candidates that cannot reach it; the rest are probed for each
    non-essential lexeme by the postings' primary key. The buckets read are those `visible_to`
    gives the caller (the rule that counts their N) and, with `odd` (`caller_stats` saw own shared
    rows that no visible bucket gives them), the owner's copies of the buckets holding those. No
    item row is read: the postings hold only rows served by default on main, so every row here is
    one `servable` would give."""
    p = Bm25Posting
    terms = select(
        func.unnest(bindparam("s_lex", type_=ARRAY(TEXT))).label("lex"),
        func.unnest(bindparam("s_df", type_=ARRAY(BigInteger))).label("df"),
        func.unnest(bindparam("s_ord", type_=ARRAY(Integer))).label("ord"),
    ).subquery("terms")
    big_n = bindparam("s_n", type_=BigInteger)
    w = func.ln(1 + (big_n - terms.c.df + 0.5) / (terms.c.df + 0.5))
    w0 = select(terms.c.lex, terms.c.ord, w.label("w")).subquery("w0")
    rest = func.sum(w0.c.w).over(order_by=w0.c.ord.desc())  # idf sum of this lexeme and every commoner one
    idf = select(w0.c.lex, w0.c.ord, w0.c.w, rest.label("rest")).cte("idf").prefix_with("MATERIALIZED")
    lexes = bindparam("s_lex", type_=ARRAY(TEXT))
    ord_ = place_of(lexes, p.lexeme) - 1  # the posting's lexeme's place in s_lex, from 0
    bids = visible_bids(principal, type_, odd=odd)
    if pruned:
        rows, essential = _pruned_rows(principal, bids, idf, ord_)
    else:  # the rarest lexemes hold fewer than n rows: no theta, every lexeme is essential
        rows = select(p.id, func.bit_or(_bit(ord_)).label("m")).where(in_buckets(principal, bids, lexes))
        rows, essential = rows.group_by(p.id).cte("rows").prefix_with("MATERIALIZED"), true()
    fm = _mask_scores(select(rows.c.m).distinct().subquery("fd"), idf, "fm")
    top = (
        select(rows.c.id, fm.c.s.label("r"))
        .join(fm, fm.c.m == rows.c.m)
        .order_by(fm.c.s.desc(), rows.c.id)
        .limit(bindparam("s_top", type_=Integer))
        .subquery("top")
    )
    n_essential = select(func.count()).select_from(idf).where(essential).scalar_subquery()
    return select(as_text(top.c.id).label("id"), top.c.r, n_essential.label("e")).order_by(top.c.r.desc(), top.c.id)


def _pruned_rows(principal: Principal, bids, idf, ord_):
    """MaxScore's candidates (id, lexeme mask) and the condition that a lexeme is essential. Each
    step reads the postings of an array of lexemes (the first ones, the essential ones) and takes a
    lexeme's weight or bit from its place (`ord_`), and the candidates that can still reach the top
    n are those whose mask is in an array of passing masks: no join to a small CTE, which
    PostgreSQL planned as nested loops (thousands of rows times every lexeme or mask)."""
    p = Bm25Posting
    weight = element(func.array_agg(aggregate_order_by(idf.c.w, idf.c.ord)), ord_ + 1, Float)  # the posting's lexeme's idf
    first = (
        select(p.id, func.sum(weight).label("r"))
        .where(in_buckets(principal, bids, bindparam("s_first", type_=ARRAY(TEXT))))
        .group_by(p.id)
        .cte("first")
        .prefix_with("MATERIALIZED")
    )
    theta1 = select(first.c.r).order_by(first.c.r.desc()).offset(bindparam("s_skip", type_=Integer)).limit(1).scalar_subquery()
    th = select(theta1.label("t")).cte("th").prefix_with("MATERIALIZED")  # once, however often it is read
    t1 = select(th.c.t).scalar_subquery()
    essential = or_(t1.is_(None), idf.c.rest >= t1 - _SLACK)
    ess = cast(select(func.array_agg(idf.c.lex)).where(essential).scalar_subquery(), ARRAY(TEXT))
    cand = (
        select(p.id, func.min(p.bid).label("bid"), func.bit_or(_bit(ord_)).label("m"))
        .where(in_buckets(principal, bids, ess))
        .group_by(p.id)
        .cte("cand")
        .prefix_with("MATERIALIZED")
    )
    ne = select(idf.c.ord, idf.c.lex, idf.c.w).where(~essential).cte("ne").prefix_with("MATERIALIZED")
    ne_n = select(func.count()).select_from(ne).scalar_subquery()  # no probe at all when every lexeme is essential
    q = aliased(Bm25Posting, name="q")
    probe = (
        select(func.coalesce(func.bit_or(_bit(ne.c.ord)), 0))
        .where(
            select(q.id)
            .where(q.org_id == principal.org_id, q.bid == cand.c.bid, q.lexeme == ne.c.lex, q.id == cand.c.id)
            .correlate_except(q)
            .exists()
        )
        .scalar_subquery()
    )
    ms = _mask_scores(select(cand.c.m, func.count().label("k")).group_by(cand.c.m).subquery("cm"), idf, "ms")
    cum = select(ms.c.s, func.sum(ms.c.k).over(order_by=ms.c.s.desc()).label("c")).subquery("cum")
    theta2 = select(cum.c.s).where(cum.c.c >= bindparam("s_top", type_=Integer)).order_by(cum.c.s.desc()).limit(1)
    t2 = theta2.scalar_subquery()
    ne_sum = select(func.coalesce(func.sum(ne.c.w), 0)).scalar_subquery()
    passing = cast(select(func.array_agg(ms.c.m)).where(ms.c.s + ne_sum >= t2 - _SLACK).scalar_subquery(), ARRAY(BigInteger))
    rows = (
        select(cand.c.id, case((ne_n > 0, cand.c.m.op("|")(probe)), else_=cand.c.m).label("m"))
        .where(or_(ne_n == 0, t2.is_(None), cand.c.m == func.any(passing)))
        .cte("rows")
        .prefix_with("MATERIALIZED")
    )
    return rows, essential


def _odd_bids(principal: Principal, type_: str):
    """The ids of the owner's copies (migration 0033's `OWNER_COPY`) of the shared buckets the
    caller owns rows in but cannot see: their own rows that no visible bucket gives them. The
    copies' names are made first (a few), then looked up by the ids' primary key (a join on the
    made name was planned as a hash join over every bucket id of the org: 9 ms at 40,000)."""
    o, i = Bm25Owned, Bm25BucketId
    bucket = case(
        (o.visibility == "org", func.concat("o:", cast(o.labels, TEXT))),
        else_=func.concat("g:", cast(o.groups, TEXT), "|", cast(o.labels, TEXT)),
    )
    names = select(func.concat("w:", o.owner_id, "|", bucket)).where(
        o.org_id == principal.org_id,
        o.item_type == type_,
        o.owner_id == principal.user_id,
        ~visible_to(replace(principal, user_id=_NOBODY), o),
    )
    return select(i.bid).where(
        i.org_id == principal.org_id, i.item_type == type_, i.bucket == func.any(func.array(names.scalar_subquery()))
    )


def _mask_scores(masks, idf, name: str):
    """Each distinct mask of `masks` (and its other columns) with its score: the idf of its
    lexemes summed in lexeme order, as the exact statement sums a row's."""
    s = select(func.sum(aggregate_order_by(idf.c.w, idf.c.lex))).where(masks.c.m.op("&")(_bit(idf.c.ord)) != 0).scalar_subquery()
    return select(*masks.c, s.label("s")).cte(name).prefix_with("MATERIALIZED")
