"""POST /v1/context: hot context for a model call, within budget, only what the caller may see."""

from __future__ import annotations

import uuid
from dataclasses import replace

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.cartridges.service import visible_active
from app.context.assemble import Piece, fit, now_utc, recency, render, sections, trim
from app.feedback import calibration
from app.kit.database.replicas import on
from app.kit.items import SEARCH_TYPES
from app.search import service as search
from app.search.prepare import Prepared
from app.search.schemas import SearchFilters
from app.search.service import RankCall, record_retrieval, to_result
from app.search.tuning import DEFAULT_TUNING, Tuning

INSTRUCTION_KINDS = ("rule", "procedure")
# An episode's outcome does not weigh its score in context: a failed trajectory's feedback often
# holds the correction its question needs, and a success may be reported for a wrong answer
# (the figures: docs/search.md).


def retrieved_pieces(db: Session, call: RankCall, *, session_id: str | None = None) -> list[Piece]:
    """Each item type ranked on its own (`call` with its second round) as context pieces, and the
    turns next to the retrieved conversation turns (unless an instruction filtered the request).
    The three rankings run at once, on side sessions bound like `db` (search.rank_each)."""
    principal = call.principal
    now = now_utc()
    out: list[Piece] = []
    filtered = call.filters != SearchFilters()  # an instruction's: no neighbours
    # per type, the neighbour pairs (and rows) its ranking fetched for its pool of turns
    found: list[dict | None] = [None if filtered else {} for _ in SEARCH_TYPES]
    ranked = search.rank_each(db, [replace(call, types=(t,)) for t in SEARCH_TYPES], found)
    known = found[SEARCH_TYPES.index("episode")] or {}
    for type_, (results, _) in zip(SEARCH_TYPES, ranked):
        for r in results:
            if type_ == "memory":
                section = "instructions" if r.kind in INSTRUCTION_KINDS else "memories"
                score = r.score * (0.5 + 0.5 * (r.confidence or 0.5)) * recency(r.created_at, now)
                out.append(Piece(section, "memory", str(r.id), r.text, score, extra={"kind": r.kind}))
            elif type_ == "episode":
                if session_id is not None and r.session_id == session_id:
                    continue  # the session's own history is in the summary / recent messages
                out.append(_episode_piece(r, r.score * recency(r.created_at, now)))
            else:
                out.append(Piece("knowledge", "chunk", str(r.id), r.text, r.score, extra={"content_hash": r.content_hash}))
    if filtered:
        return out  # an instruction's filters hold for every piece; neighbours are not filtered
    return out + _neighbours(db, principal, [p for p in out if p.type == "episode"], known)


NEIGHBOUR_WEIGHT = 0.5  # a turn next to a retrieved turn, relative to that turn's score


def candidates(budget: int) -> int:
    """How many items of each type a `budget`-token context asks search for: enough to fill it."""
    return max(10, min(100, budget // 30))


EPISODE_CHARS = 1200


def _episode_piece(r, score: float, **extra) -> Piece:
    """An episode (a SearchResult) as context; long ones cut. Its date goes in when rendered."""
    text = r.text if len(r.text) <= EPISODE_CHARS else r.text[:EPISODE_CHARS] + " …"
    at = r.occurred_at
    return Piece(
        "examples",
        "episode",
        str(r.id),
        text,
        score,
        extra={
            "kind": r.kind,
            "outcome": r.outcome,
            "session_id": r.session_id,
            "occurred_at": at.isoformat() if at else None,
            **extra,
        },
    )


def _neighbours(db: Session, principal: Principal, hits: list[Piece], known: dict | None = None) -> list[Piece]:
    """The turns just before and after each retrieved conversation turn: a question's answer is
    usually the next turn, and a reply means little without what it answers. They compete for
    the budget like any piece, at NEIGHBOUR_WEIGHT of their turn's score. `known`: the pairs the
    ranking fetched for the turns of its pool (`pairs`, for the ids in `looked_up`, and the `rows`
    of its results' neighbours); only the other turns (those the second round added) are looked
    up here, and only the rows it did not load are loaded."""
    turns = {p.id: p for p in hits if p.extra.get("kind") == "conversation" and p.extra.get("session_id")}
    known = known or {}
    looked_up = {str(i) for i in known.get("looked_up", ())}
    pairs = [(n, h) for n, h in known.get("pairs", ()) if str(h) in turns]
    rest = [t for t in turns if t not in looked_up]
    pairs += search.neighbour_ids(db, principal, rest) if rest else []
    best: dict[uuid.UUID, tuple[float, str]] = {}
    for nid, hid in pairs:
        score = turns[str(hid)].score * NEIGHBOUR_WEIGHT
        if str(nid) not in turns and score > best.get(nid, (0.0, ""))[0]:
            best[nid] = (score, str(hid))
    rows = dict(known.get("rows", {}))
    missing = [i for i in best if i not in rows]
    rows.update(search.load(db, principal, "episode", missing) if missing else {})
    return [
        _episode_piece(to_result("episode", rows[i], score), score, neighbour_of=hid)
        for i, (score, hid) in best.items()
        if i in rows
    ]


def build(
    db: Session,
    prepared: Prepared,
    resources,
    *,
    budget: int,
    ef_search: int,
    tuning: Tuning = DEFAULT_TUNING,
    session=None,
    k: int | None = None,
    pinned: list[Piece] | None = None,
    read=None,
) -> dict:
    """The context for a prepared request (app.search.prepare). `pinned`: the session's own pieces
    (app.sessions.service.session_pieces) and an agent's profile (app.context.agent); `read`:
    where retrieval reads (a read replica, app.kit.database.replicas); the session's own state and the
    retrieval event stay in `db`."""
    principal, query = prepared.principal, prepared.query
    count = resources.gateway.count_tokens
    k = k or candidates(budget)
    pieces = list(pinned or [])
    # Where the org's contexts end (app/feedback/calibration.py): read before the rankings, while
    # the query's embedding is still being computed beside this request (search.rank_each waits
    # for it), rather than after them; on the primary (`db`), so that an erasure acts at once.
    cut = calibration.context_cut(db, principal.org_id)
    retrieved, cartridges = (read or on(db))(
        lambda rdb: (
            retrieved_pieces(
                rdb,
                RankCall.of(prepared, k=k, ef_search=ef_search, tuning=tuning, second_round=True),
                session_id=str(session.id) if session is not None else None,
            ),
            visible_active(rdb, principal),
        )
    )
    given = {(p.type, p.id) for p in pieces}  # an agent's profile item is not served twice
    pieces += [p for p in retrieved if (p.type, p.id) not in given]
    chosen = fit(pieces, budget, count, count_many=resources.gateway.count_tokens_many)
    # the org's feedback on earlier contexts: leave out the tail its members did not use (but for
    # the exploration share, served whole so that feedback on the tail keeps coming); the record
    # says which cut it was served with
    rid = uuid.uuid4()
    params = {"budget_tokens": budget, "session_id": str(session.id) if session else None}
    if cut is not None:
        params["cut"] = cut = calibration.served(cut, rid)
    chosen = trim(chosen, cut, calibration.bin_of, floor=calibration.FLOOR)
    text = render(chosen)
    handed = [p for p in chosen if p.type in SEARCH_TYPES]
    rid = record_retrieval(
        db,
        principal,
        kind="context",
        query=query,
        params=params,
        items=[{"type": p.type, "id": p.id, "score": round(p.score, 6), "section": p.section} for p in handed],
        rid=rid,
    )
    chunks = [p for p in chosen if p.type == "chunk"]
    prompt = render([p for p in chosen if p.type != "chunk"])
    return {
        "text": text,
        "tokens": count(text),
        "budget_tokens": budget,
        "sections": sections(chosen, count),
        "retrieval_id": rid,
        "handoff": {
            "cartridges": [{"id": str(c.id), "p": c.p, "model_id": c.model_id} for c in cartridges],
            "chunks": [{"content_hash": p.extra["content_hash"], "chunk_id": p.id} for p in chunks],
            "prompt": (prompt + "\n\n" if prompt else "") + f"Question: {query}",
        },
    }
