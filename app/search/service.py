"""Hybrid search: vector kNN + full text, fused by their normalised scores; a retrieval event per call.

Fusion (hybrid mode), per item type:
1. A fixed pool: the vector top-`pool` and the text top-`pool` among the caller's visible rows.
   The pool does not follow `k`, so the first 10 results are the same whatever `k` is asked.
2. Both scores for every pooled row (a text-only hit gets its exact cosine by id), each
   z-normalised over the pool, summed with weight `w_vector` on the cosine. Unlike RRF (k=60,
   which it replaces) this keeps how far ahead a clear winner is, so hybrid no longer falls below
   text search alone (LoCoMo dev recall@10: RRF 0.61, text 0.64, score fusion 0.68).
3. Conversation turns borrow from their context, which all-MiniLM and BM25 see one turn at a
   time: a turn gains `neighbour` x the better fused score of the turns just before and after
   it (a 3-turn window, max-pooled, when those are in the pool), then `session` x the best score
   in its session (sessions ranked first, turns taken from the best sessions).
   LoCoMo dev recall@10: + neighbours 0.73, + sessions 0.75.
4. A second round for conversation turns, no LLM, asked for by context assembly only
   (`rank(..., second_round=True)`: it costs more than search's latency target allows): the
   rarest words (not in the query) of the `expand_from` best turns so far make a second text
   query; its hits join the pool and the positive part of its z-normalised BM25 adds with
   weight `expand_weight` (steps 2-3 redone). A turn that answers often shares no word with the
   question but shares a name or a rare word with the turns that match it.
   Leave-one-conversation-out on LoCoMo dev: docs/decisions.md.
5. For conversation turns, before steps 3-4: the vocabulary lift (app/search/lexicon.py), the
   words of the pooled rows nearest to the query's embedding scoring rows like extra BM25 terms
   (positive z-part x `vocab_weight`, its best rows join the pool), and after the context signals
   a length prior (`length_prior` x the row's ln(1 + lexemes), centred on the pool).
   LoCoMo dev recall@10 0.746 -> 0.761 through the service (docs/decisions.md, twelfth stop).
6. For conversation turns, when the query names a time ("in May 2023", "last week"): its turns
   join the pool and being inside the window is a lift like the others (`Tuning.time_weight`);
   a signal, never a filter (docs/decisions.md, nineteenth stop).
The final score is squashed into (0, 1) with a logistic so that context assembly can keep
multiplying it by confidence and recency. Every statistic (z-scores, BM25 df and N) is taken
over rows the caller may be served, so another user's rows never shape the ranking.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.db import released
from app.kit.embedding import beside, vector
from app.kit.registry import text_of
from app.kit.replicas import on
from app.lineage.service import record_retrieval
from app.search import repository as repo
from app.search.repository_expansion import expansion_rows
from app.search.instruction import query_window
from app.search.repository_lexicon import lift_rows
from app.search.repository_window import named_time_rows
from app.search.schemas import Interpreted, SearchFilters, SearchIn, SearchResult

RRF_K = 60


@dataclass(frozen=True)
class Tuning:
    """Hybrid ranking settings. Defaults chosen on LoCoMo dev with leave-one-conversation-out
    (docs/decisions.md); `fusion="rrf"` and zero weights exist for the bench's ablation table."""

    fusion: str = "zscore"  # "zscore" (score fusion) | "rrf" (the previous reciprocal-rank fusion)
    pool: int | None = 100  # candidates per retriever and type, independent of k
    # (None: the previous k-dependent depths, vector max(2k, 20) and text max(2k, 50); with "rrf" only)
    w_vector: float = 1.0  # weight of the z-normalised cosine against the z-normalised BM25
    neighbour: float = 0.5  # share of the best adjacent turn's fused score a turn gains
    session: float = 0.5  # share of its session's best score a turn gains
    expand_from: int = 5  # second round (conversation turns): seeded by this many best first-round turns
    expand_terms: int = 10  # ... using their rarest words not in the query (0: no second round)
    expand_weight: float = 0.3  # weight of the second round's z-normalised BM25
    expand_depth: int = 30  # rows the second round may add to the pool (100 scores the same on LoCoMo)
    # The vocabulary lift (conversation turns; app/search/lexicon.py): the `vocab_terms` words of the
    # caller's rows nearest to the query (cosine > vocab_min_sim) score rows like BM25 terms; the
    # positive part of that z-score adds with `vocab_weight`; its `vocab_depth` best rows join the pool.
    # Candidate words: those of the pooled rows (app/search/repository_lexicon.py). vocab_terms 0: off.
    vocab_terms: int = 5
    vocab_min_sim: float = 0.3
    vocab_weight: float = 0.5
    vocab_depth: int = 30
    # A turn gains length_prior x (ln(1 + its lexemes) - their mean over the pool): a one-word
    # "Yeah!" answers less often than a turn that says something. 0: off.
    length_prior: float = 0.3
    # A query that names a time (instruction.query_window): the `time_depth` nearest of the caller's turns
    # of that time join the pool; w x the positive part of the z-score of being inside the window adds (a
    # named day lifts far more than a named year that covers the pool). 0: off.
    time_weight: float = 1.0
    time_depth: int = 30
    # Hybrid: the caller's visible rows of a type are counted once (BM25's N); up to this many,
    # the vector pool is the exact search (cheaper and exact there: bench/service, 5.5k visible
    # of 100k, pool 100: exact 9 ms p50 vs the iterative HNSW walk 30 ms); 0: HNSW first always.
    exact_below: int = 10_000


DEFAULT_TUNING = Tuning()
_tuning = DEFAULT_TUNING


@contextlib.contextmanager
def tuned(**changes) -> Iterator[Tuning]:  # noqa: ANN003
    """Process-wide override of the ranking settings, for benchmarks' ablations only."""
    global _tuning
    before, _tuning = _tuning, replace(_tuning, **changes)
    try:
        yield _tuning
    finally:
        _tuning = before


def to_result(type_: str, row, score: float) -> SearchResult:  # noqa: ANN001
    """A loaded row (repository.load) as a search result."""
    return SearchResult(type=type_, id=row.id, text=text_of(type_, row), score=round(float(score), 6),
                        visibility=row.visibility, labels=list(row.labels), groups=list(row.groups),
                        created_at=getattr(row, "created_at", None) or row.recorded_at, kind=getattr(row, "kind", None), owner_id=row.owner_id,
                        confidence=getattr(row, "confidence", None), session_id=getattr(row, "session_id", None),
                        content_hash=getattr(row, "content_hash", None), outcome=getattr(row, "outcome", None),
                        occurred_at=getattr(row, "occurred_at", None))


def _z(values: dict) -> dict:
    """z-scores over the pool (a constant feature contributes 0)."""
    if not values:
        return {}
    mean = sum(values.values()) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values.values()) / len(values))
    return {k: (v - mean) / sd if sd > 1e-9 else 0.0 for k, v in values.items()}


def _fuse(db: Session, principal: Principal, t: str, query: str, qvec, filters: SearchFilters,  # noqa: ANN001
          ef_search: int, tun: Tuning, info: dict, k: int, second_round: bool = False) -> dict:
    """Score fusion over one type's pool (see the module docstring): {id: score in (0, 1)}."""
    nv, nt = (max(2 * k, 20), max(2 * k, 50)) if tun.pool is None and tun.fusion == "rrf" else (tun.pool or 100,) * 2
    # Text first: its one pass over the visible rows also counts them (BM25's N), which chooses
    # the vector search (exact up to `exact_below` visible rows, else the HNSW walk).
    txt, total = repo.text_scored(db, principal, t, query, filters, nt)
    qvec = vector(qvec)  # the query's embedding may have been computed meanwhile (embed_query)
    if total is None and tun.exact_below:  # a query without a lexeme: nothing counted yet
        total = repo.visible_count(db, principal, t, filters)
    if total == 0:  # nothing of this type the caller may be served: no search to run
        return {}
    mode = "exact" if tun.exact_below and total is not None and total <= tun.exact_below else "auto"
    bm25 = {id_: float(r) for id_, r in txt}
    if mode == "exact" and tun.fusion != "rrf":  # the exact top-n and the pool's rows: one statement
        vec, rows = repo.exact_pool(db, principal, t, qvec, filters, nv, list(bm25))
    else:
        vec, exact = repo.vector_ids(db, principal, t, qvec, filters, nv, ef_search, mode=mode)
        info["exact_fallbacks"] += int(exact and mode == "auto")
        rows = None
    if tun.fusion == "rrf":
        out: dict = {}
        for rows in (vec, txt):
            for i, (id_, _) in enumerate(rows):
                out[id_] = out.get(id_, 0.0) + 1.0 / (RRF_K + i + 1)
        return out
    if rows is None:
        rows = repo.pool_rows(db, principal, t, qvec, list({id_ for id_, _ in vec} | set(bm25)), filters)
    turns = t == "episode" and bool(tun.neighbour or tun.session)
    lifts: list[tuple[dict, float]] = []
    if t == "episode" and total is not None and tun.vocab_terms and tun.vocab_weight:
        rows, vocab = _vocabulary(db, principal, query, qvec, filters, tun, rows, total, info)
        lifts.append((vocab, tun.vocab_weight))
    if t == "episode" and tun.time_weight and (window := query_window(query, now=principal.view.as_of)) is not None:
        found = named_time_rows(db, principal, "episode", qvec, filters, window, WINDOW_ROWS)  # the named time's turns
        info["time_window"], rows = len(found), _joined(rows, found, tun.time_depth)
        lifts.append(({r.id: 1.0 for r in found}, tun.time_weight))
    in_sessions = [r.id for r in rows if r.session_id is not None]  # only turns of a session have neighbours
    pairs = repo.neighbour_ids(db, principal, in_sessions) if turns and tun.neighbour else []
    if turns and tun.neighbour:  # for context assembly's own neighbour pieces (no second lookup)
        info.setdefault("neighbours", {}).update({"pairs": pairs, "looked_up": set(in_sessions)})
    fused = _scored(rows, bm25, lifts, pairs, tun, turns=t == "episode")
    if second_round and t == "episode" and tun.expand_terms and tun.expand_weight and fused:
        fused = _second_round(db, principal, query, qvec, filters, tun, fused, rows, bm25, lifts, pairs, info)
    return {i: 1.0 / (1.0 + math.exp(-s)) for i, s in fused.items()}


def _vocabulary(db: Session, principal: Principal, query: str, qvec, filters: SearchFilters, tun: Tuning,  # noqa: ANN001
                rows: list, total: int, info: dict) -> tuple[list, dict]:
    """The vocabulary lift's scores over the caller's servable turns (app/search/lexicon.py), and
    the pool with its `vocab_depth` best rows added."""
    found = lift_rows(db, principal, filters, qvec, repo.query_lexemes(db, query), [r.id for r in rows], total,
                      terms=tun.vocab_terms, min_sim=tun.vocab_min_sim, n=LIFT_ROWS)
    info["vocabulary"] = len(found)
    return _joined(rows, found, tun.vocab_depth), {r.id: float(r.r) for r in found}


def _joined(rows: list, found: list, depth: int) -> list:
    """The pool with the first `depth` rows of a lift's `found` that it does not hold yet."""
    pooled = {r.id for r in rows}
    return rows + [r for r in found[:depth] if r.id not in pooled]


LIFT_ROWS = 1000  # the lift's scores come for this many rows at most (the pool's z-scores read them)
WINDOW_ROWS = 1000  # rows of a named time read at most (nearest first; a wider window's signal is weak anyway)


def _scored(rows: list, bm25: dict, lifts: list, pairs: list, tun: Tuning, *, turns: bool) -> dict:
    """The fused score of every pooled row: z-scores (`_zsum`), then for conversation turns the
    context signals and the length prior."""
    fused = _zsum(rows, tun.w_vector, bm25, lifts)
    if not turns:
        return fused
    if tun.neighbour or tun.session:
        fused = _with_context(fused, rows, pairs, tun)
    if tun.length_prior:
        size = {r.id: math.log1p(r.n_lex or 0) for r in rows}
        mean = sum(size.values()) / len(size) if size else 0.0
        fused = {i: v + tun.length_prior * (size[i] - mean) for i, v in fused.items()}
    return fused


def _zsum(rows: list, w_vector: float, bm25: dict, lifts: list[tuple[dict, float]] = ()) -> dict:
    """w_vector x z(cosine) + z(BM25) over the pooled rows (+ w x the positive part of z(lift) for
    each (lift, w): the vocabulary lift and the second round only lift, so a clear first-round
    winner without their words keeps its place). A row without an embedding counts as far as the
    farthest in the pool, a row a text query did not return as 0."""
    known = [1.0 - float(r.d) for r in rows if r.d is not None]
    floor = min(known, default=0.0)
    zc = _z({r.id: 1.0 - float(r.d) if r.d is not None else floor for r in rows})
    zb = _z({i: bm25.get(i, 0.0) for i in zc})
    out = {i: w_vector * zc[i] + zb[i] for i in zc}
    for lift, w in lifts:
        if lift and w:
            for i, zl in _z({i: lift.get(i, 0.0) for i in zc}).items():
                out[i] += w * max(0.0, zl)
    return out


def _with_context(fused: dict, rows: list, pairs: list, tun: Tuning) -> dict:
    """The neighbour and session signals of conversation turns (see the module docstring)."""
    if tun.neighbour:
        support: dict = {}
        for nid, hid in pairs:
            if nid in fused and hid in fused:
                support[hid] = max(support.get(hid, 0.0), fused[nid])
        fused = {i: s + tun.neighbour * max(0.0, support.get(i, 0.0)) for i, s in fused.items()}
    if tun.session:
        best: dict = {}
        for r in rows:
            if r.session_id is not None:
                best[r.session_id] = max(best.get(r.session_id, -math.inf), fused[r.id])
        fused = {r.id: fused[r.id] + (tun.session * best[r.session_id] if r.session_id is not None else 0.0)
                 for r in rows}
    return fused


def _second_round(db: Session, principal: Principal, query: str, qvec, filters: SearchFilters, tun: Tuning,  # noqa: ANN001
                  fused: dict, rows: list, bm25: dict, lifts: list, pairs: list, info: dict) -> dict:
    """A second text query made of the rarest words of the first round's `expand_from` best turns
    (repository_expansion): its hits join the pool and its z-normalised BM25 is added with weight
    `expand_weight` (its positive part), then the context signals are taken again over the larger
    pool. The turns it adds take no support from their own neighbours (no second neighbour
    lookup: LoCoMo recall is the same to the question, and it saves a statement), but lift the
    first-round turns they sit next to through the first round's pairs."""
    seeds = sorted(fused, key=lambda i: (-fused[i], str(i)))[:tun.expand_from]
    found = expansion_rows(db, principal, "episode", seeds, query, qvec, filters, tun.expand_terms, tun.expand_depth)
    info["second_round"] = len(found)
    if not found:
        return fused
    second = {r.id: float(r.r) for r in found}
    rows = rows + [r for r in found if r.id not in fused]
    return _scored(rows, bm25, lifts + [(second, tun.expand_weight)], pairs, tun, turns=True)


def rank(db: Session, principal: Principal, *, query: str, qvec, types: list[str], k: int, mode: str,
         filters: SearchFilters, ef_search: int, tuning: Tuning | None = None,
         second_round: bool = False, neighbours_out: dict | None = None) -> tuple[list[SearchResult], dict]:
    """Ranked visible results across `types` (no retrieval event; callers record one).
    `second_round` (step 4 of the module docstring): context assembly asks for it (its latency
    target is 100 ms); `/v1/search` does not (30 ms: the round costs ~+20 ms server-side here)."""
    tun = tuning or _tuning
    scored: dict[tuple[str, uuid.UUID], float] = {}
    info = {"exact_fallbacks": 0}
    for t in types:
        if mode == "hybrid":
            for id_, s in _fuse(db, principal, t, query, qvec, filters, ef_search, tun, info, k, second_round).items():
                scored[(t, id_)] = s
        elif mode == "vector":
            # Like hybrid: the exact search where the caller sees few rows. The HNSW walk over a
            # partition's graph can return ten visible rows that are not the nearest ten (a small
            # org's reader at 1M items: recall@10 0.92 / 0.89 on one index build, docs/decisions.md).
            few = tun.exact_below and visible_total(db, principal, t, filters) <= tun.exact_below
            rows, exact = repo.vector_ids(db, principal, t, vector(qvec), filters, k, ef_search,
                                          mode="exact" if few else "auto")
            info["exact_fallbacks"] += int(exact and not few)
            scored.update({(t, id_): 1.0 - float(d) for id_, d in rows})
        else:
            scored.update({(t, id_): float(r) for id_, r in repo.text_ids(db, principal, t, query, filters, k)})
    found = info.pop("neighbours", {})  # rows, not for the retrieval record: handed out on request
    top = sorted(scored.items(), key=lambda kv: (-kv[1], str(kv[0][1])))[:k]
    by_type: dict[str, list] = {}
    for (t, id_), _ in top:
        by_type.setdefault(t, []).append(id_)
    # The turns next to the results come in the results' own load (context assembly's neighbour
    # pieces; one statement less per /v1/context): `neighbours_out["rows"]`.
    hits = set(by_type.get("episode", ()))
    near = list({n for n, h in found.get("pairs", ()) if h in hits and n not in hits}) if neighbours_out is not None else []
    loaded = {t: repo.load(db, principal, t, ids + (near if t == "episode" else [])) for t, ids in by_type.items()}
    if neighbours_out is not None:
        neighbours_out.update(found)
        neighbours_out["rows"] = {n: loaded["episode"][n] for n in near if n in loaded.get("episode", {})}
    out = [to_result(t, loaded[t][id_], s) for (t, id_), s in top if id_ in loaded[t]]
    return out, info


_COUNTS: dict[tuple, tuple[float, int]] = {}
_COUNTS_LOCK = threading.Lock()
COUNT_TTL_S = 60.0


def visible_total(db: Session, principal: Principal, t: str, filters: SearchFilters) -> int:
    """How many rows of type `t` the caller may be served under `filters`, remembered per caller,
    view and filters for a minute in this process: vector search uses it only to choose the exact
    search over the HNSW walk, and at a large org the count reads every visible row (~40 ms for
    20,000), so a session of searches pays it once. A count, never content: nothing of another
    caller's can come from it (the key is the whole principal and the filters)."""
    key = (principal, t, filters.model_dump_json())
    now = time.monotonic()
    with _COUNTS_LOCK:
        hit = _COUNTS.get(key)
    if hit is not None and now - hit[0] < COUNT_TTL_S:
        return hit[1]
    n = repo.visible_count(db, principal, t, filters)
    with _COUNTS_LOCK:
        if len(_COUNTS) > 10_000:
            _COUNTS.clear()
        _COUNTS[key] = (now, n)
    return n


def neighbour_ids(db: Session, principal: Principal, hit_ids: list) -> list[tuple]:
    """(neighbour id, hit id): the servable turns just before and after each retrieved turn."""
    return repo.neighbour_ids(db, principal, hit_ids)


def load(db: Session, principal: Principal, type_: str, ids: list) -> dict:
    """{id: row} of the visible rows of one item type (no embeddings)."""
    return repo.load(db, principal, type_, ids)


def query_vector(embedder, body: SearchIn):  # noqa: ANN001, ANN201
    return embedder.embed([body.query])[0] if body.mode != "text" else None


def embed_query(db: Session, principal: Principal, embedder, query: str):  # noqa: ANN001, ANN201
    """The query's embedding for a request's ranking. With the embedder idle it is computed beside
    the ranking's first statements (text search and the visible-row count need no vector) and
    `rank` waits for it where it needs it: the request keeps its connection for at most one
    query's embedding. With the embedder busy (other requests, a batch being embedded) the
    request waits for its turn without holding a pooled connection (`released`), as before."""
    pending = beside(embedder, query)
    if pending is not None:
        return pending
    with released(db, principal):
        return embedder.embed([query])[0]


def search(db: Session, principal: Principal, embedder, body: SearchIn, *, ef_search: int,  # noqa: ANN001
           qvec=None, interpreted: Interpreted | None = None, read=None):  # noqa: ANN001
    """`qvec`: the query's embedding when the caller computed it already (see app.kit.db.released).
    A body with an `instruction` is read first (`with_instruction`); `interpreted` is then what
    that reading was, recorded with the retrieval event. `read`: where the ranking reads (a read
    replica, app.kit.replicas); the retrieval event is written in `db`."""
    if body.instruction and interpreted is None:
        body, interpreted = with_instruction(body, now=principal.view.as_of)
    qvec = qvec if qvec is not None else query_vector(embedder, body)
    results, info = (read or on(db))(lambda rdb: rank(
        rdb, principal, query=body.query, qvec=qvec, types=list(dict.fromkeys(body.types)),
        k=body.k, mode=body.mode, filters=body.filters, ef_search=ef_search))
    params = {"mode": body.mode, "k": body.k, "types": body.types, **info}
    if interpreted is not None:
        params["interpreted"] = interpreted.model_dump(mode="json")
    rid = record_retrieval(db, principal, kind="search", query=body.query, params=params,
                           items=[{"type": r.type, "id": str(r.id), "score": r.score} for r in results])
    return results, rid


def read_instruction(instruction: str | None, query: str, filters: SearchFilters, *, settings=None,  # noqa: ANN001, ANN201
                     resources=None, now=None):  # noqa: ANN001
    """(query, filters, Interpreted | None) for a request's `instruction`, relative times read against
    `now` (an as-of read's instant; None: the clock); the LLM reads it only when
    `settings.instruction_llm` is on (the gateway is not touched otherwise: it loads a model)."""
    from app.search.instruction import apply

    use_llm = bool(instruction and settings is not None and settings.instruction_llm and resources is not None)
    return apply(instruction, query, filters, gateway=resources.gateway if use_llm else None, use_llm=use_llm, now=now)


def with_instruction(body, *, settings=None, resources=None, now=None):  # noqa: ANN001, ANN201
    """(body with the rewritten query and the instruction's filters merged in, Interpreted);
    the body unchanged and None without an instruction."""
    if not body.instruction:
        return body, None
    query, filters, interpreted = read_instruction(body.instruction, body.query, body.filters,
                                                   settings=settings, resources=resources, now=now)
    return body.model_copy(update={"query": query, "filters": filters, "instruction": None}), interpreted
