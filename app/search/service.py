"""Hybrid search: vector kNN + full text, fused by their normalised scores; a retrieval event per call.

Fusion (hybrid mode), per item type, over a `RankCall` (the request's one carried value):
1. A fixed pool: the vector top-`pool` and the text top-`pool` among the caller's visible rows.
   The pool does not follow `k`, so the first 10 results are the same whatever `k` is asked.
2. For conversation turns, lifts that bring rows into the pool and score them: the vocabulary
   lift (app/search/lexicon.py), when the query names a time ("in May 2023", "last week"),
   that time's turns (a signal, never a filter), and when it names a speaker, that speaker's turns.
3. The signals of app/search/signals.py (`SIGNALS`: z-normalised cosine and BM25, the lifts,
   a turn's neighbours and session, a length prior, a memory's utility from feedback), each
   weighed by its `Tuning` setting; a memory held for review (docs/feedback.md) leaves the pool.
4. A second round for conversation turns, no LLM, asked for by context assembly only
   (`RankCall.second_round`: it costs more than search's latency target allows): the rarest
   words (not in the query) of the `expand_from` best turns so far make a second text query;
   its hits join the pool and its BM25 is one more lift (step 3 redone over the larger pool).
The final score is squashed into (0, 1) with a logistic of the fused score over `squash_scale`
so that context assembly can keep multiplying it by confidence and recency. Every statistic (z-scores, BM25 df and N) is taken
over rows the caller may be served, so another user's rows never shape the ranking.
The figures behind each step: docs/search.md.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from dataclasses import dataclass, field, replace

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.feedback import service as feedback
from app.kit.database.replicas import on
from app.kit.items import SEARCH_TYPES
from app.kit.registry import text_of
from app.lineage.service import record_retrieval
from app.search.prepare import Prepared, QueryVector, as_query_vector
from app.search.repository import bm25 as text_repo
from app.search.repository import rows as rows_repo
from app.search.repository import sessions as sessions_repo
from app.search.repository import vector as vector_repo
from app.search.repository.expansion import expansion_rows
from app.search.repository.lexicon import lift_rows
from app.search.repository.sessions import binding, bound_like
from app.search.repository.window import named_time_rows
from app.search.schemas import Explanation, SearchFilters, SearchIn, SearchResult
from app.search.signals import Pool, fuse, spoken_by_named
from app.search.time_window import query_window
from app.search.tuning import DEFAULT_TUNING, Tuning

RRF_K = 60
LIFT_ROWS = 1000  # the lift's scores come for this many rows at most (the pool's z-scores read them)
WINDOW_ROWS = 1000  # rows of a named time read at most (nearest first; a wider window's signal is weak anyway)
# The per-type stages of a hybrid ranking over several types run at once, each on its own pooled
# connection bound like the ranking's session: all types cost about one. At most
# sessions_repo.SIDE_CONNECTIONS extra connections in this process at any time (a type finding
# none free runs in the ranking's own session, as before).
_SIDE, _SIDE_POOL = sessions_repo.SIDE, sessions_repo.SIDE_POOL  # shared with `rank_each` (context assembly)


@dataclass(frozen=True)
class RankCall:
    """One ranking request, carried whole through the ranking: who asks (at which view), the
    query and its vector, the filters, the settings, and what is asked of the ranking."""

    principal: Principal
    query: str
    qvec: QueryVector = field(default_factory=QueryVector)  # an array or a Pending is wrapped
    types: tuple[str, ...] = SEARCH_TYPES
    k: int = 10
    mode: str = "hybrid"
    filters: SearchFilters = field(default_factory=SearchFilters)
    ef_search: int = 40
    tuning: Tuning = DEFAULT_TUNING
    second_round: bool = False  # context assembly's (see the module docstring, step 4)
    explain: bool = False  # each result's signals (app/search/signals.py)

    def __post_init__(self) -> None:
        object.__setattr__(self, "qvec", as_query_vector(self.qvec))
        object.__setattr__(self, "types", tuple(dict.fromkeys(self.types)))

    @classmethod
    def of(cls, prepared: Prepared, **asked) -> RankCall:
        """The call for a prepared request (app.search.prepare)."""
        return cls(principal=prepared.principal, query=prepared.query, qvec=prepared.qvec, filters=prepared.filters, **asked)


def to_result(type_: str, row, score: float) -> SearchResult:
    """A loaded row (repository.load) as a search result."""
    return SearchResult(
        type=type_,
        id=row.id,
        text=text_of(type_, row),
        score=round(float(score), 6),
        visibility=row.visibility,
        labels=list(row.labels),
        groups=list(row.groups),
        created_at=getattr(row, "created_at", None) or row.recorded_at,
        kind=getattr(row, "kind", None),
        owner_id=row.owner_id,
        confidence=getattr(row, "confidence", None),
        session_id=getattr(row, "session_id", None),
        content_hash=getattr(row, "content_hash", None),
        outcome=getattr(row, "outcome", None),
        occurred_at=getattr(row, "occurred_at", None),
    )


def _fuse(db: Session, call: RankCall, t: str, info: dict) -> tuple[dict, dict | None]:
    """Score fusion over one type's pool (see the module docstring): ({id: score in (0, 1)},
    {id: {signal: contribution}} when the call asks to explain)."""
    tun, k, principal = call.tuning, call.k, call.principal
    nv, nt = (max(2 * k, 20), max(2 * k, 50)) if tun.pool is None and tun.fusion == "rrf" else (tun.pool or 100,) * 2
    # Text first: its one pass over the visible rows also counts them (BM25's N), which chooses
    # the vector search (exact up to `exact_below` visible rows, else the HNSW walk).
    txt, total = text_repo.text_scored(db, principal, t, call.query, call.filters, nt)
    qvec = call.qvec.get()  # the query's embedding may have been computed meanwhile (prepare.embed_query)
    if total is None and tun.exact_below:  # a query without a lexeme: nothing counted yet
        total = text_repo.visible_count(db, principal, t, call.filters)
    if total == 0:  # nothing of this type the caller may be served: no search to run
        return {}, None
    # Few visible rows: the exact search. Else, at the pool's depth (~100 rows), the walk in parts for a caller
    # in no group (vector_repo.split_ids); at k = 10 one walk is faster, and rank's vector mode keeps it.
    mode = "exact" if tun.exact_below and total is not None and total <= tun.exact_below else "split"
    bm25 = {id_: float(r) for id_, r in txt}
    # feedback: a bounded prior, read with the pool's rows; a memory held for review leaves the pool
    votes = feedback.pool_votes(principal.org_id) if t == "memory" and tun.utility_weight else None
    if mode == "exact" and tun.fusion != "rrf":  # the exact top-n and the pool's rows: one statement
        vec, rows = vector_repo.exact_pool(db, principal, t, qvec, call.filters, nv, also_ids=list(bm25), votes=votes)
    else:
        vec, exact = vector_repo.vector_ids(db, principal, t, qvec, call.filters, nv, ef_search=call.ef_search, mode=mode)
        info["exact_fallbacks"] += int(exact and mode == "split")
        rows = None
    if tun.fusion == "rrf":
        out: dict = {}
        parts: dict = {}
        for name, found in (("vector", vec), ("bm25", txt)):
            for i, (id_, _) in enumerate(found):
                out[id_] = out.get(id_, 0.0) + 1.0 / (RRF_K + i + 1)
                parts.setdefault(id_, {})[name] = 1.0 / (RRF_K + i + 1)
        return out, parts if call.explain else None
    if rows is None:
        ids = list({id_ for id_, _ in vec} | set(bm25))
        rows = vector_repo.pool_rows(db, principal, t, qvec, ids, call.filters, votes=votes)
    turns = t == "episode" and bool(tun.neighbour or tun.session)
    lifts: dict = {}
    if t == "episode" and total is not None and tun.vocab_terms and tun.vocab_weight:
        rows, lifts["vocabulary"] = _vocabulary(db, call, rows, total, info)
    if t == "episode" and tun.time_weight and (window := query_window(call.query, now=principal.view.as_of)) is not None:
        # the named time's turns
        found = named_time_rows(db, principal, "episode", call.filters, window, qvec=qvec, n=WINDOW_ROWS)
        info["time_window"], rows = len(found), _joined(rows, found, tun.time_depth)
        lifts["time"] = {r.id: 1.0 for r in found}
    if t == "episode" and tun.speaker_weight:  # the turns of a speaker the query names
        lifts["speaker"] = spoken_by_named(call.query, {r.id: r.who.strip() for r in rows if r.who is not None})
    in_sessions = [r.id for r in rows if r.session_id is not None]  # only turns of a session have neighbours
    pairs = rows_repo.neighbour_ids(db, principal, in_sessions) if turns and tun.neighbour else []
    if turns and tun.neighbour:  # for context assembly's own neighbour pieces (no second lookup)
        info.setdefault("neighbours", {}).update({"pairs": pairs, "looked_up": set(in_sessions)})
    utility: dict = {}
    if votes is not None:
        utility, held = feedback.from_pool(rows)
        rows = [r for r in rows if r.id not in held] if held else rows
    pool = Pool(rows=rows, bm25=bm25, lifts=lifts, pairs=pairs, turns=t == "episode", utility=utility)
    fused, parts = fuse(pool, tun, explain=call.explain)
    if call.second_round and t == "episode" and tun.expand_terms and tun.expand_weight and fused:
        fused, parts = _second_round(db, call, pool, fused, info) or (fused, parts)
    return {i: 1.0 / (1.0 + math.exp(-s / tun.squash_scale)) for i, s in fused.items()}, parts


def _vocabulary(db: Session, call: RankCall, rows: list, total: int, info: dict) -> tuple[list, dict]:
    """The pool with the vocabulary lift's `vocab_depth` best rows added, and the lift's scores
    over the caller's servable turns (app/search/lexicon.py)."""
    tun = call.tuning
    found = lift_rows(
        db,
        call.principal,
        call.filters,
        qvec=call.qvec.get(),
        own=text_repo.query_lexemes(db, call.query),
        pool=[r.id for r in rows],
        total=total,
        terms=tun.vocab_terms,
        min_sim=tun.vocab_min_sim,
        n=LIFT_ROWS,
        depth=tun.vocab_depth,
    )
    info["vocabulary"] = len(found)
    return _joined(rows, found, tun.vocab_depth), {r.id: float(r.r) for r in found}


def _joined(rows: list, found: list, depth: int) -> list:
    """The pool with the first `depth` rows of a lift's `found` that it does not hold yet."""
    pooled = {r.id for r in rows}
    return rows + [r for r in found[:depth] if r.id not in pooled]


def _second_round(db: Session, call: RankCall, pool: Pool, fused: dict, info: dict) -> tuple[dict, dict | None] | None:
    """A second text query made of the rarest words of the first round's `expand_from` best turns
    (repository/expansion.py): its hits join the pool and its BM25 is one more lift, then the
    signals are taken again over the larger pool (None when it found nothing). The turns it adds
    take no support from their own neighbours (no second neighbour lookup: it saves a
    statement), but lift the first-round turns they sit next to through the first round's pairs."""
    tun = call.tuning
    seeds = sorted(fused, key=lambda i: (-fused[i], str(i)))[: tun.expand_from]
    found = expansion_rows(
        db,
        call.principal,
        "episode",
        call.filters,
        hit_ids=seeds,
        query=call.query,
        qvec=call.qvec.get(),
        n_terms=tun.expand_terms,
        n=tun.expand_depth,
    )
    info["second_round"] = len(found)
    if not found:
        return None
    rows = pool.rows + [r for r in found if r.id not in fused]
    lifts = {**pool.lifts, "second_round": {r.id: float(r.r) for r in found}}
    return fuse(replace(pool, rows=rows, lifts=lifts), tun, explain=call.explain)


def rank(db: Session, call: RankCall, *, neighbours_out: dict | None = None) -> tuple[list[SearchResult], dict]:
    """Ranked visible results across `call.types` (no retrieval event; callers record one).
    `neighbours_out`: filled with the neighbour pairs the ranking fetched and the rows of its
    results' neighbours (context assembly's neighbour pieces; one statement less per request)."""
    tun = call.tuning
    scored: dict[tuple[str, uuid.UUID], float] = {}
    parts: dict[tuple[str, uuid.UUID], dict] = {}
    info = {"exact_fallbacks": 0}
    fused = _fused_types(db, call, info) if call.mode == "hybrid" else {}
    for t in call.types:
        if call.mode == "hybrid":
            got, why = fused[t]
            scored.update({(t, id_): s for id_, s in got.items()})
            parts.update({(t, id_): p for id_, p in (why or {}).items()})
        elif call.mode == "vector":
            # Like hybrid: the exact search where the caller sees few rows. The HNSW walk over a
            # partition's graph can return ten visible rows that are not the nearest ten.
            few = tun.exact_below and visible_total(db, call.principal, t, call.filters) <= tun.exact_below
            rows, exact = vector_repo.vector_ids(
                db,
                call.principal,
                t,
                call.qvec.get(),
                call.filters,
                call.k,
                ef_search=call.ef_search,
                mode="exact" if few else "auto",
            )
            info["exact_fallbacks"] += int(exact and not few)
            scored.update({(t, id_): 1.0 - float(d) for id_, d in rows})
        else:
            scored.update(
                {(t, id_): float(r) for id_, r in text_repo.text_ids(db, call.principal, t, call.query, call.filters, call.k)}
            )
    if call.explain and call.mode != "hybrid":  # one signal: the cosine or BM25 itself
        parts = {key: {"vector" if call.mode == "vector" else "bm25": s} for key, s in scored.items()}
    found = info.pop("neighbours", {})  # rows, not for the retrieval record: handed out on request
    top = sorted(scored.items(), key=lambda kv: (-kv[1], str(kv[0][1])))[: call.k]
    by_type: dict[str, list] = {}
    for (t, id_), _ in top:
        by_type.setdefault(t, []).append(id_)
    hits = set(by_type.get("episode", ()))
    near = list({n for n, h in found.get("pairs", ()) if h in hits and n not in hits}) if neighbours_out is not None else []
    loaded = {t: rows_repo.load(db, call.principal, t, ids + (near if t == "episode" else [])) for t, ids in by_type.items()}
    if neighbours_out is not None:
        neighbours_out.update(found)
        neighbours_out["rows"] = {n: loaded["episode"][n] for n in near if n in loaded.get("episode", {})}
    out = [to_result(t, loaded[t][id_], s) for (t, id_), s in top if id_ in loaded[t]]
    if call.explain:
        out = [_explained(r, parts.get((r.type, str(r.id)), {}), call) for r in out]
    return out, info


def rank_each(db: Session, calls: list[RankCall], outs: list[dict | None]) -> list[tuple[list[SearchResult], dict]]:
    """`rank` of each call (`outs`: each one's `neighbours_out`), at once on side sessions bound
    like `db` (repository/sessions.py `at_once`): context assembly ranks each type on its own."""
    for c in calls:
        c.qvec.get()  # the query's embedding, awaited here rather than in several threads at once
    jobs = [lambda s, c=c, o=o: rank(s, c, neighbours_out=o) for c, o in zip(calls, outs)]
    return sessions_repo.at_once(db, jobs)


def _fused_types(db: Session, call: RankCall, info: dict) -> dict[str, tuple[dict, dict | None]]:
    """`_fuse` of every type of the call: the first in `db`, the others at once on side sessions
    bound like `db` (app/search/repository/sessions.py) while side connections are free, else in
    `db` after it. Not when `db`'s transaction has written: a side session would not see that."""
    types = list(call.types)
    settings = binding(db) if len(types) > 1 else None
    side: list[str] = []
    for t in types[1:] if settings is not None else ():
        if not _SIDE.acquire(blocking=False):
            break
        side.append(t)
    if side:
        call.qvec.get()  # the query's embedding, awaited once here rather than in several threads at once
    futures = {t: _SIDE_POOL.submit(_fuse_aside, db.get_bind(), settings, db.info, call, t) for t in side}
    out, infos = {}, []
    try:
        for t in types:
            if t not in futures:
                out[t] = _fuse(db, call, t, info)
    finally:
        for t, fut in futures.items():  # every side stage is awaited (and its connection given back) before returning
            try:
                out[t], part = fut.result()
                infos.append(part)
            except BaseException as e:
                out[t], part = e, None
    for part in infos:
        for key, value in part.items():
            info[key] = info.get(key, 0) + value if key == "exact_fallbacks" else value
    for value in out.values():
        if isinstance(value, BaseException):
            raise value
    return out


def _fuse_aside(engine, settings: dict, db_info: dict, call: RankCall, t: str) -> tuple[tuple, dict]:
    try:
        with bound_like(engine, settings, db_info) as side:
            part = {"exact_fallbacks": 0}
            return _fuse(side, call, t, part), part
    finally:
        _SIDE.release()


def _explained(r: SearchResult, parts: dict, call: RankCall) -> SearchResult:
    """The result with its signals' contributions; the last one (the logistic squash for score
    fusion, the rounding otherwise) takes the raw sum to the score, so that they sum to it."""
    signals = dict(parts)
    closing = "logistic" if call.mode == "hybrid" and call.tuning.fusion != "rrf" else "rounding"
    signals[closing] = signals.get(closing, 0.0) + (r.score - sum(parts.values()))
    return r.model_copy(update={"explain": Explanation(signals=signals)})


_COUNTS: dict[tuple, tuple[float, int]] = {}
_COUNTS_LOCK = threading.Lock()
COUNT_TTL_S = 60.0


def visible_total(db: Session, principal: Principal, t: str, filters: SearchFilters) -> int:
    """How many rows of type `t` the caller may be served under `filters`, remembered per caller,
    view and filters for a minute in this process: vector search uses it only to choose the exact
    search over the HNSW walk, and at a large org the count reads every visible row, so a session
    of searches pays it once. A count, never content: nothing of another caller's can come from it
    (the key is the whole principal and the filters)."""
    key = (principal, t, filters.model_dump_json())
    now = time.monotonic()
    with _COUNTS_LOCK:
        hit = _COUNTS.get(key)
    if hit is not None and now - hit[0] < COUNT_TTL_S:
        return hit[1]
    n = text_repo.visible_count(db, principal, t, filters)
    with _COUNTS_LOCK:
        if len(_COUNTS) > 10_000:
            _COUNTS.clear()
        _COUNTS[key] = (now, n)
    return n


def neighbour_ids(db: Session, principal: Principal, hit_ids: list) -> list[tuple]:
    """(neighbour id, hit id): the servable turns just before and after each retrieved turn."""
    return rows_repo.neighbour_ids(db, principal, hit_ids)


def load(db: Session, principal: Principal, type_: str, ids: list) -> dict:
    """{id: row} of the visible rows of one item type (no embeddings)."""
    return rows_repo.load(db, principal, type_, ids)


def search(
    db: Session, prepared: Prepared, body: SearchIn, *, ef_search: int, tuning: Tuning = DEFAULT_TUNING, read=None
) -> tuple[list[SearchResult], uuid.UUID]:
    """Rank a prepared request (app.search.prepare: the instruction is read there, once) and record
    the retrieval event, with what the instruction was read as. `read`: where the ranking reads (a
    read replica, app.kit.database.replicas); the retrieval event is written in `db`."""
    call = RankCall.of(
        prepared, types=tuple(body.types), k=body.k, mode=body.mode, ef_search=ef_search, tuning=tuning, explain=body.explain
    )
    results, info = (read or on(db))(lambda rdb: rank(rdb, call))
    params = {"mode": body.mode, "k": body.k, "types": body.types, **info}
    if prepared.interpreted is not None:
        params["interpreted"] = prepared.interpreted.model_dump(mode="json")
    rid = record_retrieval(
        db,
        prepared.principal,
        kind="search",
        query=prepared.query,
        params=params,
        items=[{"type": r.type, "id": str(r.id), "score": r.score} for r in results],
    )
    return results, rid
