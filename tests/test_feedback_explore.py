"""A context cut that keeps itself fed (app/feedback/calibration.py, exploration): a cut context hands
out no tail, so feedback on it says nothing about the tail; an exploration share of contexts is
served whole, the tail estimates read only whole contexts' observations, and the cut stays in
place while the org's feedback runs through the window several times."""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.feedback import calibration as cal
from tests.test_feedback_context import FACTS, QUERY

WINDOW = 60  # the window of feedback events, small so that the test runs through it three times
SHARE = 0.3  # exploration share in the test: enough whole contexts in every small window
TOP = cal.FLOOR  # what members use: the best items, which a cut context always keeps


def _use_top(client, actor) -> dict:
    """One context, answered with `used` feedback on its TOP best items only (members read the top)."""
    r = client.post("/v1/context", json={"query": QUERY, "budget_tokens": 2000}, headers=actor.h)
    assert r.status_code == 200, r.text
    ctx = r.json()
    got = sorted((i for s in ctx["sections"] for i in s["items"] if i.get("id")), key=lambda i: -i["score"])
    items = [{"type": i["type"], "id": i["id"], "signal": "used"} for i in got[:TOP]]
    r = client.post("/v1/feedback", json={"retrieval_id": ctx["retrieval_id"], "items": items}, headers=actor.h)
    assert r.status_code == 201, r.text
    return ctx


def test_the_cut_stays_in_place_through_several_windows_of_feedback(client, world, admin_engine, monkeypatch):
    monkeypatch.setattr(cal, "WINDOW", WINDOW)
    monkeypatch.setattr(cal, "EXPLORE", SHARE, raising=False)
    org = world.org()
    users = [world.user(org) for _ in range(cal.MIN_USERS)]
    for f in FACTS:
        r = client.post("/v1/memories", json={"text": f, "kind": "fact", "visibility": "org"}, headers=users[0].h)
        assert r.status_code == 201, r.text
    org_id = users[0].org_id
    cuts, served = [], []
    with Session(admin_engine) as s:
        for i in range(3 * WINDOW + cal.MIN_OBSERVATIONS):
            ctx = _use_top(client, users[i % len(users)])
            served.append((uuid.UUID(ctx["retrieval_id"]), len([x for sec in ctx["sections"] for x in sec["items"]])))
            cuts.append(cal.of_org(s, org_id).cut_bin())
            s.rollback()
        formed = next(i for i, c in enumerate(cuts) if c is not None)
        assert len(cuts) - formed > 2 * WINDOW  # the run goes on for more than two windows after the cut formed
        # without exploration the cut lapses once the whole contexts behind it leave the window
        assert [i for i, c in enumerate(cuts) if i > formed and c is None] == []
        # each context after the cut formed was served as its record says: cut, or whole for the
        # exploration share, decided by its retrieval id alone
        params = dict(
            s.execute(text("SELECT id, params FROM retrieval_events WHERE org_id = :o AND kind = 'context'"), {"o": org_id}).all()
        )
        later = served[formed + 1 :]
        for rid, n in later:
            got = params[rid]
            assert "cut" in got
            assert (got["cut"] is None) == cal.explores(rid)
            assert (n == len(FACTS)) == (got["cut"] is None)  # whole, or shorter
        whole = sum(1 for rid, _ in later if cal.explores(rid))
        assert 0 < whole < len(later)


def test_the_tails_read_only_whole_contexts():
    """An observation of a cut context (its unused tail missing) would pull the tail estimates up
    towards "engaged": it counts for `users` and `observations`, never for a tail."""
    users = [uuid.UUID(int=u) for u in range(1, 4)]
    bins = list(range(cal.BINS))
    whole = [(u, bins, [True] + [False] * (cal.BINS - 1), True) for u in users for _ in range(10)]
    cut = [(u, bins[:3], [True, False, False], False) for u in users for _ in range(30)]
    base, mixed = cal.fit(whole), cal.fit(whole + cut)
    assert mixed.tail == base.tail and mixed.weight == base.weight
    assert mixed.observations == len(whole) + len(cut) and mixed.users == base.users == 3
    assert mixed.cut_bin() == base.cut_bin() == 1


def test_exploration_is_a_share_of_retrieval_ids_and_reproducible():
    ids = [uuid.UUID(int=i * 7919 + 1) for i in range(4000)]
    share = sum(cal.explores(i) for i in ids) / len(ids)
    assert abs(share - cal.EXPLORE) < 0.02
    assert [cal.served(4, i) for i in ids[:50]] == [cal.served(4, i) for i in ids[:50]]
    assert all(cal.served(None, i) is None for i in ids[:50])  # no cut in force: every context whole
    assert {cal.served(4, i) for i in ids} == {None, 4}
