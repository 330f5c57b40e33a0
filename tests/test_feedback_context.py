"""Feedback that shortens /v1/context (app/feedback/calibration.py, app/context/assemble.py `trim`):
the org's calibration of where the used part of a context ends, learnt from feedback on earlier
contexts; no (or too little) feedback leaves the context as it was; one key's weight is bounded;
another org's feedback never counts; erasure of a user removes their share."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy.orm import Session

from app.context.assemble import Piece, trim
from app.feedback import calibration as cal

FACTS = [
    "The billing service deploys from the main branch every Tuesday.",
    "Billing invoices are generated on the first day of each month.",
    "The billing database keeps invoices for seven years.",
    "Billing alerts page the payments on-call through PagerDuty.",
    "Refunds over 500 euros in billing need a second approval.",
    "The billing API rate limit is 100 requests per second.",
    "Billing exports to the ledger run nightly at 01:00 UTC.",
    "The office coffee machine is descaled on Fridays.",
    "The design team uses Figma for mock-ups.",
    "Parking spaces are booked through the facilities portal.",
    "The library closes at six in the evening.",
    "Team lunches are on the last Thursday of the month.",
]
QUERY = "when does the billing service deploy?"


def _cal(admin_engine, org_id) -> cal.Calibration:
    with Session(admin_engine) as s:
        return cal.of_org(s, org_id)


def _mem(client, actor, text_: str) -> str:
    r = client.post("/v1/memories", json={"text": text_, "kind": "fact", "visibility": "org"}, headers=actor.h)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _context(client, actor, query: str = QUERY) -> dict:
    r = client.post("/v1/context", json={"query": query, "budget_tokens": 2000}, headers=actor.h)
    assert r.status_code == 200, r.text
    return r.json()


def _items(ctx: dict) -> list[str]:
    return [i["id"] for s in ctx["sections"] for i in s["items"] if i.get("id")]


def _use_top(client, actor, n: int) -> None:
    """`n` contexts, each answered with feedback that names only its best item (the tail unused)."""
    for _ in range(n):
        ctx = _context(client, actor)
        best = max((i for s in ctx["sections"] for i in s["items"] if i.get("id")), key=lambda i: i["score"])
        r = client.post(
            "/v1/feedback",
            json={"retrieval_id": ctx["retrieval_id"], "items": [{"type": "memory", "id": best["id"], "signal": "helpful"}]},
            headers=actor.h,
        )
        assert r.status_code == 201, r.text


def _org_with_facts(client, world):
    org = world.org()
    users = [world.user(org) for _ in range(cal.MIN_USERS)]
    for f in FACTS:
        _mem(client, users[0], f)
    return org, users


def test_the_calibration_learns_from_feedback_and_shortens_a_context_whose_tail_was_never_used(
    client, world, admin_engine, monkeypatch
):
    monkeypatch.setattr(cal, "EXPLORE", 0.0)  # no context served whole for exploration: the cut is seen
    org, users = _org_with_facts(client, world)
    before = _context(client, users[0])
    assert len(_items(before)) == len(FACTS)  # a 2,000-token budget holds every fact
    per_user = -(-cal.MIN_OBSERVATIONS // len(users))
    for u in users:
        _use_top(client, u, per_user)
    got = _cal(admin_engine, users[0].org_id)
    assert got.active and got.users == len(users) and got.observations == per_user * len(users)
    assert got.cut_bin() is not None
    after = _context(client, users[0])
    kept = _items(after)
    assert cal.FLOOR <= len(kept) < len(FACTS)
    assert set(kept) <= set(_items(before))  # only removed, never added
    assert after["tokens"] < before["tokens"]
    assert _items(before)[0] in kept  # the best item stays


def test_too_little_feedback_or_feedback_on_searches_leaves_the_context_byte_for_byte(client, world, admin_engine):
    org, users = _org_with_facts(client, world)
    before = _context(client, users[0])
    _use_top(client, users[0], cal.MIN_OBSERVATIONS + 5)  # one user alone: below MIN_USERS
    _use_top(client, users[1], 2)
    for _ in range(5):  # feedback on searches is not about where a context ends
        s = client.post("/v1/search", json={"query": QUERY, "types": ["memory"]}, headers=users[2].h).json()
        item = {"type": "memory", "id": s["results"][0]["id"], "signal": "helpful"}
        r = client.post("/v1/feedback", json={"retrieval_id": s["retrieval_id"], "items": [item]}, headers=users[2].h)
        assert r.status_code == 201
    assert not _cal(admin_engine, users[0].org_id).active
    after = _context(client, users[0])
    assert after["text"] == before["text"] and after["tokens"] == before["tokens"]
    assert _items(after) == _items(before)


def test_another_orgs_feedback_never_changes_my_context(client, world, admin_engine):
    _, theirs = _org_with_facts(client, world)
    _, mine = _org_with_facts(client, world)
    before = _context(client, mine[0])
    for u in theirs:
        _use_top(client, u, -(-cal.MIN_OBSERVATIONS // len(theirs)))
    assert _cal(admin_engine, theirs[0].org_id).cut_bin() is not None
    assert _cal(admin_engine, mine[0].org_id).observations == 0
    assert _context(client, mine[0])["text"] == before["text"]


def test_erasing_a_user_removes_their_share_of_the_calibration(client, world, admin_engine, monkeypatch):
    monkeypatch.setattr(cal, "EXPLORE", 0.0)
    org, users = _org_with_facts(client, world)
    admin = world.user(org, roles=["admin"])
    full = _context(client, users[0])
    per_user = -(-cal.MIN_OBSERVATIONS // len(users))
    for u in users:
        _use_top(client, u, per_user)
    assert len(_items(_context(client, users[0]))) < len(_items(full))
    assert client.delete(f"/v1/users/{users[2].user_id}/data", headers=admin.h).status_code == 202
    got = _cal(admin_engine, users[0].org_id)
    assert got.users == len(users) - 1 and got.observations == per_user * (len(users) - 1)
    assert not got.active  # below MIN_USERS again: the context is whole
    assert _context(client, users[0])["text"] == full["text"]


def test_a_users_repeated_feedback_on_one_context_counts_once(client, world, admin_engine):
    org, users = _org_with_facts(client, world)
    ctx = _context(client, users[0])
    for i in _items(ctx):
        r = client.post(
            "/v1/feedback",
            json={"retrieval_id": ctx["retrieval_id"], "items": [{"type": "memory", "id": i, "signal": "used"}]},
            headers=users[0].h,
        )
        assert r.status_code == 201
    got = _cal(admin_engine, users[0].org_id)
    assert got.observations == 1 and got.users == 1
    assert got.tail[0] == pytest.approx(2.0 / 3.0)  # every item engaged, one observation: (1 + 1) / (1 + 2)


def _obs(user, engaged_tail: bool):
    """An observation: one item per bin, the top always engaged, the rest as `engaged_tail`."""
    return (user, list(range(cal.BINS)), [True] + [engaged_tail] * (cal.BINS - 1), True)


def test_one_key_flooding_moves_every_tail_estimate_by_at_most_the_bound():
    honest = [_obs(uuid.UUID(int=u), u % 2 == 0) for u in range(1, 4) for _ in range(10)]
    base = cal.fit(honest)
    for flood in (5, 50, 5000):
        for engaged in (True, False):
            mallory = uuid.UUID(int=99)
            got = cal.fit(honest + [_obs(mallory, engaged)] * flood)
            for b in range(cal.BINS):
                bound = cal.one_user_bound(base.weight[b])
                assert abs(got.tail[b] - base.tail[b]) <= bound + 1e-12
            assert got.weight[1] - base.weight[1] <= cal.USER_CAP + 1e-9
    # the bound is reached, not loose: the cap binds at a flood of USER_CAP or more
    worst = cal.fit(honest + [_obs(uuid.UUID(int=99), False)] * 500)
    assert base.tail[1] - worst.tail[1] == pytest.approx(
        cal.USER_CAP * (base.tail[1]) / (base.weight[1] + cal.USER_CAP + 2.0), rel=1e-9
    )
    assert base.tail[1] - worst.tail[1] <= cal.one_user_bound(base.weight[1])


def test_trim_only_removes_the_tail_and_keeps_the_floor():
    pieces = [Piece("memories", "memory", str(i), f"fact {i}", score=0.95 - i / 10) for i in range(8)]
    pinned = Piece("working_context", "working_context", None, "state", pinned=True)
    chosen = [pinned, *pieces]
    assert trim(chosen, None, cal.bin_of, floor=3) is chosen
    assert [cal.bin_of(p.score, pieces[0].score) for p in pieces[:4]] == [0, 1, 2, 3]
    assert trim(chosen, 4, cal.bin_of, floor=0) == [pinned, *pieces[:4]]
    assert trim(chosen, 2, cal.bin_of, floor=3) == [pinned, *pieces[:3]]
    assert trim(chosen, 1, cal.bin_of, floor=3) == [pinned, *pieces[:3]]
    assert trim(chosen, 1, cal.bin_of, floor=0) == [pinned, pieces[0]]


def test_the_stamp_reads_the_latest_window_and_sees_an_erased_event_in_it(client, world, admin_engine):
    """The calibration is kept while `stamp` is unchanged: `stamp` describes exactly the events the
    refit would read (the latest `window`), so removing one of them changes it and removing an
    older one does not (the refit would read the same events)."""
    from sqlalchemy import text

    from app.feedback import repository as repo

    _, users = _org_with_facts(client, world)
    org = users[0].org_id
    _use_top(client, users[0], 5)
    with Session(admin_engine) as s:
        ids = (
            s.execute(text("SELECT id FROM feedback_events WHERE org_id = :o ORDER BY at DESC, id DESC"), {"o": org})
            .scalars()
            .all()
        )
        assert len(ids) == 5
        first = repo.stamp(s, org, 3)
        assert first[0] == 3
        s.execute(text("DELETE FROM feedback_events WHERE org_id = :o AND id = :i"), {"o": org, "i": ids[-1]})
        assert repo.stamp(s, org, 3) == first  # outside the window: the refit would read the same events
        s.execute(text("DELETE FROM feedback_events WHERE org_id = :o AND id = :i"), {"o": org, "i": ids[1]})
        second = repo.stamp(s, org, 3)
        assert second != first and second[0] == 3  # the window now reaches one event further back
        assert [r[0] for r in repo.context_feedback(s, org, 3)] == [
            r
            for r in s.execute(
                text("SELECT retrieval_id FROM feedback_events WHERE org_id = :o AND id = ANY(:ids) ORDER BY at DESC, id DESC"),
                {"o": org, "ids": [ids[0], ids[2], ids[3]]},
            ).scalars()
        ]
        s.rollback()
