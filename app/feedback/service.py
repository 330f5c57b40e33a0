"""Feedback on what a retrieval handed out, and the utility it gives each memory.

Who may give it: the caller who received the retrieval (stewards and admins: any retrieval of
their org), about items that retrieval handed out and that the caller may still see. Any other
case (no such retrieval, someone else's, an item it did not hand out, an item hidden from the
caller) is the same 404 with the same body, so a probe learns nothing of what exists.

A memory's utility is a Beta(1, 1) posterior over "helps" vs "misleads" when handed out:
`helpful` and `wrong` are sums over distinct users of 0.5^(age / HALF_LIFE_DAYS), each user's
latest say counted once (app/feedback/models.py: one vote per memory, user and signal; helpful and
wrong of one user exclude each other), and `estimate` = (helpful + 1) / (helpful + wrong + 2).
So one user adds at most 1 to one side, and moves the estimate by at most ONE_USER_BOUND from
what the others' votes make it ((h + 1) / ((h + w + 2)(h + w + 3)) <= 1/6, at h + w <= 1).
`used` and the retrieval's `outcome` are kept with the event (for training and audit), not
counted; `outdated` votes feed consolidation's supersede proposals (pipelines/consolidation/).

Held for review: a memory that at least WRONG_USERS distinct users found wrong, and more wrong
than helpful (decayed sums), is what consolidation quarantines; hybrid ranking leaves it out of
the pool from the moment the rule holds, so it stops misleading before the job runs. Feedback
never changes who may see an item: the ranking reads utilities only for rows the caller may
already be served (app/search/signals.py), and can only remove a row, never add one.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.feedback import repository as repo
from app.feedback.schemas import FeedbackIn, Utility
from app.kit.errors import NotFound
from app.kit.items import ITEM_TYPES, MEMORY

HALF_LIFE_DAYS = 90.0
ONE_USER_BOUND = 1.0 / 6.0
WRONG_USERS = 3  # distinct users who said `wrong` (and more wrong than helpful): held for review
VOTED = ("helpful", "wrong", "outdated")  # the signals that leave a vote on a memory
_OPPOSITE = {"helpful": "wrong", "wrong": "helpful"}


def _absent() -> NotFound:
    return NotFound("retrieval or item not found")


def give(db: Session, principal: Principal, body: FeedbackIn) -> uuid.UUID:
    """Store one feedback event on a retrieval, the memories' votes, and its audit event; the id."""
    ev = repo.retrieval(db, principal.org_id, body.retrieval_id)
    if ev is None or (ev.actor_id != principal.user_id and not principal.has_role("steward", "admin")):
        raise _absent()
    handed = {(i["type"], i["id"]) for i in ev.items}
    wanted: dict[str, set] = {}
    for it in body.items:
        if (it.type, str(it.id)) not in handed:
            raise _absent()
        wanted.setdefault(it.type, set()).add(it.id)
    for type_, ids in wanted.items():
        if repo.visible_ids(db, principal, ITEM_TYPES[type_].model, list(ids)) != ids:
            raise _absent()
    fid, now = uuid.uuid4(), datetime.now(UTC)
    items = [{"type": it.type, "id": str(it.id), "signal": it.signal} for it in body.items]
    repo.add_event(
        db,
        id=fid,
        org_id=principal.org_id,
        retrieval_id=ev.id,
        actor_id=principal.user_id,
        items=items,
        outcome=body.outcome,
        at=now,
    )
    votes = {(it.id, it.signal) for it in body.items if it.type == MEMORY and it.signal in VOTED}
    for memory_id, signal in sorted(votes, key=str):
        repo.vote(
            db,
            org_id=principal.org_id,
            memory_id=memory_id,
            actor_id=principal.user_id,
            signal=signal,
            at=now,
            replaces=_OPPOSITE.get(signal),
        )
    counts: dict[str, int] = {}
    for it in body.items:
        counts[it.signal] = counts.get(it.signal, 0) + 1
    record(
        db,
        org_id=principal.org_id,
        actor_id=principal.user_id,
        action="feedback.create",
        target_type="retrieval",
        target_id=ev.id,
        details={
            "feedback_id": str(fid),
            "signals": counts,
            "outcome": body.outcome,
            "items": [{"type": i["type"], "id": i["id"], "signal": i["signal"]} for i in items],
        },
    )
    return fid


def estimate(helpful: float, wrong: float) -> float:
    """The Beta(1, 1) posterior mean."""
    return (helpful + 1.0) / (helpful + wrong + 2.0)


@dataclass
class Tally:
    helpful: float = 0.0  # decayed sums over distinct users
    wrong: float = 0.0
    wrong_users: int = 0  # distinct users whose `wrong` stands, however old

    @property
    def held(self) -> bool:
        """The quarantine rule: enough distinct users found it wrong, and more wrong than helpful."""
        return self.wrong_users >= WRONG_USERS and self.wrong > self.helpful

    def out(self) -> Utility:
        return Utility(
            helpful=round(self.helpful, 4), wrong=round(self.wrong, 4), estimate=round(estimate(self.helpful, self.wrong), 4)
        )


def tallies(db: Session, org_id: uuid.UUID, memory_ids: list) -> dict[str, Tally]:
    """{memory id as text: its tally} for the memories among `memory_ids` (ids or their text) that
    have helpful or wrong votes."""
    out: dict = {}
    for memory_id, signal, weight, voters in repo.decayed_counts(db, org_id, memory_ids, HALF_LIFE_DAYS * 86400.0):
        t = out.setdefault(memory_id, Tally())
        setattr(t, signal, float(weight))
        if signal == "wrong":
            t.wrong_users = int(voters)
    return out


def utilities(db: Session, org_id: uuid.UUID, memory_ids: list) -> dict[str, Utility]:
    """{memory id as text: its utility} for the memories among `memory_ids` that have helpful or
    wrong votes. The caller passes only ids it may serve."""
    return {m: t.out() for m, t in tallies(db, org_id, memory_ids).items()}


def utility_of(db: Session, org_id: uuid.UUID, memory_id: uuid.UUID) -> Utility | None:
    return utilities(db, org_id, [memory_id]).get(str(memory_id))


def pool_votes(org_id: uuid.UUID):
    """What a ranking pool's statement joins to read its memories' votes with their rows (the
    repository's `votes_of`, for this org): called with the statement's memory id column, it gives
    the LATERAL subquery whose columns `from_pool` reads: a ranking reads the numbers of `tallies`
    without a statement of its own for them."""
    return functools.partial(repo.votes_of, org_id=org_id, half_life_s=HALF_LIFE_DAYS * 86400.0)


def from_pool(rows) -> tuple[dict[str, float], set[str]]:
    """({memory id: estimate}, ids held for review) of a ranking pool whose rows carry `pool_votes`'
    columns (helpful, wrong, wrong_users); a memory without helpful or wrong votes is in neither."""
    estimates: dict[str, float] = {}
    held: set[str] = set()
    for r in rows:
        if r.helpful is None and r.wrong is None:
            continue
        t = Tally(float(r.helpful or 0.0), float(r.wrong or 0.0), int(r.wrong_users or 0))
        estimates[r.id] = estimate(t.helpful, t.wrong)
        if t.held:
            held.add(r.id)
    return estimates, held


def held_for_review(db: Session, org_id: uuid.UUID) -> dict[uuid.UUID, int]:
    """{memory id: distinct users who found it wrong} of the org's memories the quarantine rule holds for."""
    many = repo.voters(db, org_id, "wrong", WRONG_USERS)
    return {uuid.UUID(m): t.wrong_users for m, t in tallies(db, org_id, list(many)).items() if t.held}


def flagged(db: Session, org_id: uuid.UUID, signal: str, at_least: int) -> dict[uuid.UUID, int]:
    """{memory id: distinct users} of the memories at least `at_least` users gave `signal` (consolidation)."""
    return repo.voters(db, org_id, signal, at_least)


def of_retrieval(db: Session, principal: Principal, retrieval_id: uuid.UUID) -> list[dict]:
    """The feedback events on one retrieval the caller may read (app.lineage.service.retrieval checks that)."""
    return [
        {"id": str(e.id), "actor": str(e.actor_id), "at": e.at.isoformat(), "outcome": e.outcome, "items": e.items}
        for e in repo.events_of(db, principal.org_id, retrieval_id)
    ]


def forget_user(db: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> int:
    """Right to be forgotten: the user's feedback events and votes go (the feedback others gave on
    the user's retrievals goes with those retrievals). Returns how many rows were removed."""
    events, votes = repo.delete_by_actor(db, org_id, user_id)
    return events + votes
