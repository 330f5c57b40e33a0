"""Statements over feedback events and votes (org-level row-level security beneath each)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Float, bindparam, cast, delete, func, insert, literal, select
from sqlalchemy.dialects.postgresql import ARRAY, UUID
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.feedback.models import FeedbackEvent, FeedbackVote
from app.kit.database.sql import IdList, StatementCache, as_text
from app.kit.tenancy.access import visible_to
from app.lineage.models import RetrievalEvent


def retrieval(db: Session, org_id: uuid.UUID, retrieval_id: uuid.UUID) -> RetrievalEvent | None:
    return db.execute(
        select(RetrievalEvent).where(RetrievalEvent.org_id == org_id, RetrievalEvent.id == retrieval_id)
    ).scalar_one_or_none()


def visible_ids(db: Session, principal: Principal, model, ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """Which of `ids` the caller may see now (the one access helper, as every read path)."""
    if not ids:
        return set()
    return set(db.execute(select(model.id).where(model.id.in_(ids), visible_to(principal, model))).scalars())


def add_event(db: Session, **values) -> None:
    db.execute(insert(FeedbackEvent), values)


def vote(
    db: Session, *, org_id: uuid.UUID, memory_id: uuid.UUID, actor_id: uuid.UUID, signal: str, at: datetime, replaces: str | None
) -> None:
    """The user's one vote of `signal` on the memory, at `at` (a repeat only moves its time); the
    vote it `replaces` (helpful <-> wrong) goes."""
    if replaces is not None:
        db.execute(
            delete(FeedbackVote).where(
                FeedbackVote.org_id == org_id,
                FeedbackVote.memory_id == memory_id,
                FeedbackVote.actor_id == actor_id,
                FeedbackVote.signal == replaces,
            )
        )
    stmt = pg_insert(FeedbackVote).values(org_id=org_id, memory_id=memory_id, actor_id=actor_id, signal=signal, at=at)
    db.execute(
        stmt.on_conflict_do_update(index_elements=["org_id", "memory_id", "signal", "actor_id"], set_={"at": stmt.excluded.at})
    )


# One statement for every pool: the ids bound as one array literal (app/kit/database/sql.py `IdList`), so its
# text never changes with the pool's size and SQLAlchemy and psycopg reuse it. The literal is
# unnested once in a subquery: as a row filter (`= ANY(CAST(...))`) the cast ran for every vote row.
_IDS = select(func.unnest(cast(bindparam("ids", type_=IdList()), ARRAY(UUID(as_uuid=True))))).scalar_subquery()


def _weight(half_life):
    """A vote's weight 0.5^(age / half-life), in double precision: EXTRACT returns numeric, and
    numeric power() costs ~0.5 ms a row."""
    age = func.greatest(cast(func.extract("epoch", func.now() - FeedbackVote.at), Float), 0.0)
    return func.power(cast(0.5, Float), age / half_life)


_WEIGHT = _weight(bindparam("half_life_s", type_=Float))
_DECAYED = (
    select(as_text(FeedbackVote.memory_id).label("memory_id"), FeedbackVote.signal, func.sum(_WEIGHT), func.count())
    .where(
        FeedbackVote.org_id == bindparam("org_id"),
        FeedbackVote.memory_id.in_(_IDS),
        FeedbackVote.signal.in_(("helpful", "wrong")),
    )
    .group_by(FeedbackVote.memory_id, FeedbackVote.signal)
)


# Compiled once and run through the driver (app/kit/database/sql.py `StatementCache`): building the
# construct, SQLAlchemy's cache key and its expanding `IN` cost more Python than PostgreSQL spends
# planning and running these statements. Neither holds an access filter (the org is bound, and
# row-level security beneath checks it), so one compiled form serves every caller.
_STATEMENTS = StatementCache(8)


def decayed_counts(db: Session, org_id: uuid.UUID, memory_ids: list, half_life_s: float) -> list:
    """(memory id as text, signal, sum of 0.5^(age / half-life) over its voters, voters) for the
    memories that have votes: one index range per memory on the primary key (org_id, memory_id, ...)."""
    if not memory_ids:
        return []
    values = {"org_id": org_id, "ids": list(memory_ids), "half_life_s": half_life_s}
    return _STATEMENTS.run(db, ("decayed",), lambda: _DECAYED, values).all()


def votes_of(memory_id, *, org_id: uuid.UUID, half_life_s: float):
    """A LATERAL subquery, for a statement that fetches memory rows, giving the memory `memory_id`
    (a column of that statement) its `helpful` and `wrong` sums of 0.5^(age / half-life) over its
    voters (NULL without such votes) and `wrong_users` (distinct users whose `wrong` stands): the
    numbers of `decayed_counts`, read with the row by the primary key (org_id, memory_id, ...)
    instead of by a statement of their own. The org and the half-life are baked in (the caller's
    statement is compiled per caller); row-level security beneath checks the org again."""
    v, w = FeedbackVote, _weight(literal(half_life_s, Float))
    helpful, wrong = v.signal == "helpful", v.signal == "wrong"
    return (
        select(
            func.sum(w).filter(helpful).label("helpful"),
            func.sum(w).filter(wrong).label("wrong"),
            func.count().filter(wrong).label("wrong_users"),
        )
        .where(v.org_id == literal(org_id, UUID(as_uuid=True)), v.memory_id == memory_id, v.signal.in_(("helpful", "wrong")))
        .lateral("votes")
    )


def voters(db: Session, org_id: uuid.UUID, signal: str, at_least: int) -> dict:
    """{memory_id: distinct users} for the memories at least `at_least` users gave `signal`."""
    n = func.count(FeedbackVote.actor_id)
    rows = db.execute(
        select(FeedbackVote.memory_id, n)
        .where(FeedbackVote.org_id == org_id, FeedbackVote.signal == signal)
        .group_by(FeedbackVote.memory_id)
        .having(n >= at_least)
    ).all()
    return {m: c for m, c in rows}


def delete_by_actor(db: Session, org_id: uuid.UUID, actor_id: uuid.UUID) -> tuple[int, int]:
    """(events, votes) of one user removed."""
    events = db.execute(
        delete(FeedbackEvent)
        .where(FeedbackEvent.org_id == org_id, FeedbackEvent.actor_id == actor_id)
        .returning(FeedbackEvent.id)
    ).all()
    votes = db.execute(
        delete(FeedbackVote)
        .where(FeedbackVote.org_id == org_id, FeedbackVote.actor_id == actor_id)
        .returning(FeedbackVote.memory_id)
    ).all()
    return len(events), len(votes)


def events_of(db: Session, org_id: uuid.UUID, retrieval_id: uuid.UUID) -> list[FeedbackEvent]:
    return list(
        db.execute(
            select(FeedbackEvent)
            .where(FeedbackEvent.org_id == org_id, FeedbackEvent.retrieval_id == retrieval_id)
            .order_by(FeedbackEvent.at)
        ).scalars()
    )


def _recent(org_id, window: int, *cols):
    """The org's latest `window` feedback events (by the `(org_id, at, id)` index: a bounded read
    whatever the org's history)."""
    e = FeedbackEvent
    return select(*cols).where(e.org_id == org_id).order_by(e.at.desc(), e.id.desc()).limit(window).subquery("recent")


def _stamp_select(window: int):
    r = _recent(bindparam("org_id", type_=UUID(as_uuid=True)), window, FeedbackEvent.id, FeedbackEvent.at)
    return select(func.count(), func.max(r.c.at), func.coalesce(func.sum(func.hashtext(as_text(r.c.id))), 0))


def stamp(db: Session, org_id: uuid.UUID, window: int) -> tuple:
    """(events, latest time, a sum of their ids' hashes) of the org's latest `window` feedback
    events: changes whenever an event enters that window or one in it is removed (an erasure, a
    cascade), and reads at most `window` index entries."""
    return tuple(_STATEMENTS.run(db, ("stamp", window), lambda: _stamp_select(window), {"org_id": org_id}).one())


def context_feedback(db: Session, org_id: uuid.UUID, window: int) -> list:
    """(retrieval id, user, the event's items, what the retrieval handed out, its params) of the feedback on
    `/v1/context` retrievals among the org's latest `window` feedback events (the events `stamp`
    describes)."""
    e = FeedbackEvent
    r = _recent(org_id, window, e.retrieval_id, e.actor_id, e.items, e.at)
    return db.execute(
        select(r.c.retrieval_id, r.c.actor_id, r.c["items"], RetrievalEvent.items, RetrievalEvent.params)
        .join(RetrievalEvent, (RetrievalEvent.org_id == org_id) & (RetrievalEvent.id == r.c.retrieval_id))
        .where(RetrievalEvent.kind == "context")
        .order_by(r.c.at.desc())
    ).all()
