"""What feedback costs a ranking and a context in round trips: a memory pool's votes come with the
statement that brings its rows into the pool (no statement of their own), with the same numbers
as the separate read (`feedback.utilities`) on both pool statements; a context reads where the
org's contexts end once, before its rankings (while the query's embedding is computed beside it),
not after them."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from app.search.tuning import DEFAULT_TUNING
from tests.test_feedback import FACTS, WRONG, _context, _mem, _say, _search
from tests.test_search_pathcost import _principal, _statements

Q = "how do I fail over the primary database?"


def _judged(client, world):
    """An org whose members judged the memories of Q: WRONG wrong by three users (held for
    review), the others handed out helpful or wrong by turns, one user's say on each."""
    org = world.org()
    author = world.user(org)
    users = [world.user(org) for _ in range(3)]
    ids = [_mem(client, author, f, visibility="org") for f in FACTS]
    bad = _mem(client, author, WRONG, visibility="org")
    for n, u in enumerate(users):
        found = _search(client, u, Q)
        items = [{"type": "memory", "id": bad, "signal": "wrong"}] + [
            {"type": "memory", "id": r["id"], "signal": "helpful" if (i + n) % 3 else "wrong"}
            for i, r in enumerate(found["results"])
            if r["id"] != bad and i % 3 == n
        ]
        assert _say(client, u, found["retrieval_id"], items).status_code == 201
    return author, ids, bad


def _ranked(app, actor, tuning):
    from app.kit.database.db import bind_principal
    from app.search.service import RankCall, rank

    p = _principal(actor)
    qvec = app.state.resources.embedder.embed_queries([Q])[0]
    with app.state.sessions() as db:
        bind_principal(db, p)
        with _statements(db.get_bind()) as sent:
            results, _ = rank(db, RankCall(principal=p, query=Q, qvec=qvec, types=("memory",), k=20, tuning=tuning, explain=True))
        db.rollback()
    return results, sent


def _reference(app, actor, ids):
    """The utilities as the separate statement reads them (GET and lineage use it)."""
    from app.feedback import service as feedback
    from app.kit.database.db import bind_principal

    with app.state.sessions() as db:
        bind_principal(db, _principal(actor))
        got = feedback.tallies(db, actor.org_id, ids)
        db.rollback()
    return got


@pytest.mark.parametrize("exact_below", [DEFAULT_TUNING.exact_below, 0], ids=["exact_pool", "pool_rows"])
def test_the_votes_come_with_the_pool_rows(client, world, exact_below):
    """No statement reads the votes on its own: every statement naming feedback_votes is one that
    brings rows into the pool (it reads their lexeme count too), on both pool statements (the
    exact search's, and `pool_rows` after the HNSW walk); each memory's utility signal is the one
    the separate read gives, one without votes has none, and the memory three users found wrong
    leaves the ranking."""
    author, ids, bad = _judged(client, world)
    tuning = replace(DEFAULT_TUNING, exact_below=exact_below)
    results, sent = _ranked(client.app, author, tuning)
    votes = [s for s in sent if "feedback_votes" in s]
    assert votes and all("n_lex" in s for s in votes), votes
    assert all(("AS top" in s) == bool(exact_below) for s in votes)  # the pool statement each case names
    ref = _reference(client.app, author, ids + [bad])
    assert ref[bad].held and bad not in [str(r.id) for r in results]
    judged = [r for r in results if str(r.id) in ref]
    assert judged and len(judged) < len(results)  # some memories with votes, some without
    w = DEFAULT_TUNING.utility_weight
    for r in results:
        t = ref.get(str(r.id))
        if t is None:
            assert "utility" not in r.explain.signals
        else:
            est = (t.helpful + 1.0) / (t.helpful + t.wrong + 2.0)
            assert r.explain.signals["utility"] == pytest.approx(w * math.log(max(est, 0.1) / 0.5), abs=1e-4)


def test_a_context_reads_its_cut_once_before_its_rankings(client, world):
    """The calibration's stamp (the org's latest feedback events) is read once per context, before
    the first statement of the rankings, and the votes of the memory pool come with its rows."""
    author, _, bad = _judged(client, world)
    with client.app.state.sessions() as db:
        engine = db.get_bind()
    with _statements(engine) as sent:
        ctx = _context(client, author, Q)
    stamps = [i for i, s in enumerate(sent) if "feedback_events" in s and "hashtext" in s]
    pools = [i for i, s in enumerate(sent) if "n_lex" in s]
    assert len(stamps) == 1 and pools and stamps[0] < pools[0], (stamps, pools)
    assert all("n_lex" in s for s in sent if "feedback_votes" in s)
    assert bad not in [p["id"] for s in ctx["sections"] for p in s["items"]]
