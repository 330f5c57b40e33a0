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
Feedback never changes who may see an item: the ranking reads utilities only for rows the caller
may already be served (app/search/signals.py).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.feedback import repository as repo
from app.feedback.schemas import FeedbackIn, Utility
from app.kit.errors import NotFound
from app.kit.items import ITEM_TYPES, MEMORY

HALF_LIFE_DAYS = 90.0
ONE_USER_BOUND = 1.0 / 6.0
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
    fid, now = uuid.uuid4(), datetime.now(timezone.utc)
    items = [{"type": it.type, "id": str(it.id), "signal": it.signal} for it in body.items]
    repo.add_event(db, id=fid, org_id=principal.org_id, retrieval_id=ev.id, actor_id=principal.user_id, items=items,
                   outcome=body.outcome, at=now)
    votes = {(it.id, it.signal) for it in body.items if it.type == MEMORY and it.signal in VOTED}
    for memory_id, signal in sorted(votes, key=str):
        repo.vote(db, org_id=principal.org_id, memory_id=memory_id, actor_id=principal.user_id, signal=signal, at=now,
                  replaces=_OPPOSITE.get(signal))
    counts: dict[str, int] = {}
    for it in body.items:
        counts[it.signal] = counts.get(it.signal, 0) + 1
    record(db, org_id=principal.org_id, actor_id=principal.user_id, action="feedback.create",
           target_type="retrieval", target_id=ev.id,
           details={"feedback_id": str(fid), "signals": counts, "outcome": body.outcome,
                    "items": [{"type": i["type"], "id": i["id"], "signal": i["signal"]} for i in items]})
    return fid


def estimate(helpful: float, wrong: float) -> float:
    """The Beta(1, 1) posterior mean."""
    return (helpful + 1.0) / (helpful + wrong + 2.0)


def utilities(db: Session, org_id: uuid.UUID, memory_ids: list) -> dict[uuid.UUID, Utility]:
    """{memory id: its utility} for the memories among `memory_ids` that have helpful or wrong votes.
    The caller passes only ids it may serve."""
    sums: dict = {}
    for memory_id, signal, weight in repo.decayed_counts(db, org_id, memory_ids, HALF_LIFE_DAYS * 86400.0):
        sums.setdefault(memory_id, {"helpful": 0.0, "wrong": 0.0})[signal] = float(weight)
    return {m: Utility(helpful=round(s["helpful"], 4), wrong=round(s["wrong"], 4),
                       estimate=round(estimate(s["helpful"], s["wrong"]), 4)) for m, s in sums.items()}


def utility_of(db: Session, org_id: uuid.UUID, memory_id: uuid.UUID) -> Utility | None:
    return utilities(db, org_id, [memory_id]).get(memory_id)


def estimates(db: Session, org_id: uuid.UUID, memory_ids: list) -> dict[uuid.UUID, float]:
    """{memory id: estimate} for the ranking (app/search/signals.py `utility`); absent: no feedback."""
    return {m: u.estimate for m, u in utilities(db, org_id, memory_ids).items()}


def flagged(db: Session, org_id: uuid.UUID, signal: str, at_least: int) -> dict[uuid.UUID, int]:
    """{memory id: distinct users} of the memories at least `at_least` users gave `signal` (consolidation)."""
    return repo.voters(db, org_id, signal, at_least)


def of_retrieval(db: Session, principal: Principal, retrieval_id: uuid.UUID) -> list[dict]:
    """The feedback events on one retrieval the caller may read (app.lineage.service.retrieval checks that)."""
    return [{"id": str(e.id), "actor": str(e.actor_id), "at": e.at.isoformat(), "outcome": e.outcome, "items": e.items}
            for e in repo.events_of(db, principal.org_id, retrieval_id)]


def forget_user(db: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> int:
    """Right to be forgotten: the user's feedback events and votes go (the feedback others gave on
    the user's retrievals goes with those retrievals). Returns how many rows were removed."""
    events, votes = repo.delete_by_actor(db, org_id, user_id)
    return events + votes
