"""Vector kNN over one item type, always under `servable`.

HNSW filters *after* its graph walk, so a restrictive ACL can make `WHERE visible ORDER BY
emb <=> q LIMIT k` come back short (NOTES.md). We plan it knowingly: a first pass lets the
planner use HNSW with a raised `hnsw.ef_search`; if it returns fewer than k rows we run the
exact filtered search (the `+ 0` in ORDER BY keeps HNSW out), which is cheap precisely when the
visible set is small. Statements are never prepared (see app.kit.database.db.make_engine).
"""

from __future__ import annotations

from sqlalchemy import cast, literal, select, text, true, union_all
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.database.sql import among_bound, as_text
from app.kit.registry import ITEM_TYPES
from app.search.repository.filters import STATEMENTS, limit_param, pool_columns, qvec_param, servable, shape, with_speakers
from app.search.schemas import SearchFilters

SCAN_MODES = ("auto", "ef", "relaxed", "strict", "exact", "split")
MAX_SCAN_TUPLES = 20_000  # pgvector's default bound on an iterative walk (modes relaxed/strict)
AUTO_SCAN_TUPLES = 10_000  # auto: a deeper walk loses recall (docs/search.md); past it, the exact search


def vector_ids(
    db: Session, principal: Principal, type_: str, qvec, f: SearchFilters, n: int, *, ef_search: int, mode: str = "auto"
) -> tuple[list[tuple], bool]:
    """Top-n (id, distance) among visible rows; returns (rows, used_exact).

    Modes (bench/filtered_knn measures them side by side; docs/decisions.md has the figures):
    `exact` — the filtered exact search (`+ 0` keeps HNSW out); `ef` — one HNSW pass at
    `ef_search` with the planner free to choose (under an ACL filter it mostly chooses a full
    sort); `relaxed`/`strict` — pgvector 0.8's
    iterative index scan (`hnsw.iterative_scan`): the walk goes on until n visible rows are found
    or `hnsw.max_scan_tuples` is spent, sorting is disabled for the statement so that the planner
    takes the index (its row estimates for the ACL filter are ~200x low), and relaxed order is
    re-sorted here; `auto` — relaxed at `ef_search`, the walk bounded to AUTO_SCAN_TUPLES: a
    visible set too sparse to fill n rows within it (where a deeper walk loses recall) falls to
    the exact search, which is what such a small
    visible set wants. Whatever the mode, fewer than n rows is never returned as is: the exact search decides
    whether more visible rows exist.
    """
    if mode == "split" and not principal.groups:
        return split_ids(db, principal, type_, qvec, f, n, ef_search=ef_search)
    mode = "auto" if mode == "split" else mode
    return _walk(db, principal, type_, qvec, f, n, ef_search=ef_search, mode=mode)


def _walk(
    db: Session, principal: Principal, type_: str, qvec, f: SearchFilters, n: int, *, ef_search: int, mode: str, part: str = ""
) -> tuple[list[tuple], bool]:
    """`vector_ids` over the rows of `part` ("" all the caller's servable rows, "org" the
    org-visible bucket: `_bucket`)."""
    m = ITEM_TYPES[type_].model

    def build(exact: bool):
        dist = m.embedding.cosine_distance(qvec_param(m))
        return (
            select(as_text(m.id).label("id"), dist.label("d"))
            .where(*servable(principal, type_, f), m.embedding.is_not(None), *_bucket(principal, m, part))
            .order_by(dist + 0 if exact else dist)
            .limit(limit_param("n"))
        )

    key, values = ("vector", part) + shape(principal, type_, f), {"qvec": qvec, "n": n}
    if mode != "exact":
        iterative = mode in ("relaxed", "strict", "auto")
        walk = {"hnsw.ef_search": str(int(ef_search))}
        if iterative:
            walk["hnsw.iterative_scan"] = f"{'strict' if mode == 'strict' else 'relaxed'}_order"
            walk["hnsw.max_scan_tuples"] = str(int(AUTO_SCAN_TUPLES if mode == "auto" else MAX_SCAN_TUPLES))
            walk["enable_sort"] = "off"
        _set_local(db, walk)
        rows = STATEMENTS.run(db, key + (False,), lambda: build(False), values).all()
        # Not in a `finally`: after a failed statement the transaction is aborted (its SET LOCALs
        # die with it), and a cleanup statement there would replace the connection error that the
        # replica reader falls back on with PendingRollbackError (a 500 while a replica stopped).
        if iterative:
            _set_local(db, {"hnsw.iterative_scan": "off", "enable_sort": "on"})
            rows.sort(key=lambda r: r.d)
        if len(rows) >= n:
            return rows, False
    return STATEMENTS.run(db, key + (True,), lambda: build(True), values).all(), True


def _set_local(db: Session, values: dict[str, str]) -> None:
    """`SET LOCAL` of each setting, in one statement (one round trip instead of one per setting)."""
    names = list(values)
    sql = "SELECT " + ", ".join(f"set_config(:k{i}, :v{i}, true)" for i in range(len(names)))
    db.execute(text(sql), {**{f"k{i}": k for i, k in enumerate(names)}, **{f"v{i}": values[k] for i, k in enumerate(names)}})


def _bucket(principal: Principal, m, part: str) -> list:
    """The extra conditions of one part of the caller's servable rows (`split_ids`). "org": the
    org-visible rows, in the words of the partial HNSW index `ix_<t>_embedding_org_hnsw` so that
    the planner walks it. "own": the caller's own other rows (the (org_id, owner_id) btree)."""
    if part == "org":
        return [m.visibility == "org"]
    if part == "own":
        return [m.visibility != "org", m.org_id == principal.org_id, m.owner_id == principal.user_id]
    return []


def split_ids(
    db: Session, principal: Principal, type_: str, qvec, f: SearchFilters, n: int, *, ef_search: int
) -> tuple[list[tuple], bool]:
    """Top-n (id, distance) among the visible rows of a caller in no group, in two parts whose
    union is exactly them: the org-visible rows by an iterative walk of their own partial HNSW
    index (a graph that no private or group row dilutes, so the walk finds n of them within few
    tuples; a bucket too sparse in its graph falls to its exact search, cheap precisely then),
    and the caller's own other rows (a small set) by the exact search. The two top-n lists merged
    by distance are the top n of the union. Returns (rows, whether the org part took the exact
    search). A caller in groups sees group rows besides: no small set, so `vector_ids` walks the
    full graph for them (bench/speed/filtered_knn/variants.py measured a group part walked on
    its own partial graph, or searched exactly, and both lost to the full walk)."""
    shared, fell = _walk(db, principal, type_, qvec, f, n, ef_search=ef_search, mode="auto", part="org")
    m = ITEM_TYPES[type_].model

    def build():
        dist = m.embedding.cosine_distance(qvec_param(m))
        return (
            select(as_text(m.id).label("id"), dist.label("d"))
            .where(*servable(principal, type_, f), m.embedding.is_not(None), *_bucket(principal, m, "own"))
            .order_by(dist + 0)
            .limit(limit_param("n"))
        )

    own = STATEMENTS.run(db, ("vector_own",) + shape(principal, type_, f), build, {"qvec": qvec, "n": n}).all()
    return sorted(list(shared) + list(own), key=lambda r: (r.d, r.id))[:n], fell


def exact_pool(
    db: Session, principal: Principal, type_: str, qvec, f: SearchFilters, n: int, *, also_ids: list, votes=None
) -> tuple[list[tuple], list[tuple]]:
    """The exact vector top-n (id, distance) among visible rows and the fusion pool's rows (id,
    distance, session_id, n_lex, who: `pool_rows`) of those and `also_ids` (the text hits), in one statement:
    where hybrid takes the exact search (few visible rows) it was two, with the same filters.
    `votes`: as in `pool_rows`."""
    m = ITEM_TYPES[type_].model

    def build(also: bool):
        conds = servable(principal, type_, f)
        dist = m.embedding.cosine_distance(qvec_param(m))
        kept = (
            select(*pool_columns(m, type_, content=True))
            .where(*conds, m.embedding.is_not(None))
            .order_by(dist + 0)
            .limit(limit_param("n"))
            .subquery("kept")
        )
        top = with_speakers(kept, type_).add_columns(literal(True).label("top"))
        pool = (
            top
            if not also
            else union_all(
                top, select(*pool_columns(m, type_), literal(False).label("top")).where(among_bound(m.id, "also"), *conds)
            )
        )
        return pool if votes is None else _with_votes(pool.subquery("pool"), votes)

    also = bool(also_ids)
    got = STATEMENTS.run(
        db,
        ("exact_pool", also, votes is not None) + shape(principal, type_, f),
        lambda: build(also),
        {"qvec": qvec, "n": n, **({"also": list(also_ids)} if also else {})},
    ).all()
    vec = sorted(((r.id, r.d) for r in got if r.top), key=lambda x: x[1])
    pool = list({r.id: r for r in got}.values())
    return vec, pool


def _with_votes(pool, votes):
    """The rows of the subquery `pool` with the columns of `votes(their memory id)` (a LATERAL
    subquery of one row per pooled row: app/feedback/service.py `pool_votes`)."""
    v = votes(cast(pool.c.id, UUID(as_uuid=True)))
    return select(pool, *v.c).select_from(pool.join(v, true()))


def pool_rows(db: Session, principal: Principal, type_: str, qvec, ids: list, f: SearchFilters, *, votes=None) -> list[tuple]:
    """(id, cosine distance, session_id, n_lex: the row's lexeme count, who: an episode's speaker;
    `filters.pool_columns`) of the fusion pool's rows, by primary key.

    Score fusion needs both scores of every candidate: a row found by text search alone gets its
    exact cosine here (at most a few hundred rows, fetched by id, so no HNSW walk), and episodes
    bring their session for the session signal and their speaker for the speaker lift. Same
    filters as the searches themselves. A row without an embedding comes back with distance NULL
    (the caller scores it as the pool's farthest) rather than dropping out of hybrid results.
    `votes`: a memory pool's feedback, read with its rows (app/feedback/service.py `pool_votes`:
    a builder of the LATERAL subquery whose columns each row then carries too).
    """
    if not ids:
        return []
    m = ITEM_TYPES[type_].model

    def build():
        pool = select(*pool_columns(m, type_)).where(among_bound(m.id, "ids"), *servable(principal, type_, f))
        return pool if votes is None else _with_votes(pool.subquery("pool"), votes)

    key = ("pool_rows", votes is not None) + shape(principal, type_, f)
    return STATEMENTS.run(db, key, build, {"qvec": qvec, "ids": list(ids)}).all()
