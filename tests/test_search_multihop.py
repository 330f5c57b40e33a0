"""The speaker lift (signals.spoken_by_named; the pool statements' `who` column,
repository/filters.py `pool_columns`): a query that names a speaker lifts that speaker's pooled
turns; it shows in `explain` and sums to the score, reads only the caller's pool (another user's
or org's turns of that speaker never enter or move it), and with its weight 0 the ranking is the
one without it."""

from __future__ import annotations

from dataclasses import replace

from app.search.signals import Pool, fuse, spoken_by_named
from app.search.tuning import DEFAULT_TUNING
from tests.test_search_ranking import _tuned, _turn

QUERY = "What does Caroline like to do on weekends?"


def _conversation(client, actor) -> list[str]:
    turns = [
        _turn("Melanie: What do you like to do on weekends?", "s1", 0),
        _turn("Caroline: Mostly I go hiking in the hills with my dog.", "s1", 1),
        _turn("Melanie: I like to paint on weekends, it calms me.", "s1", 2),
        _turn("Caroline: I also started a pottery class at the community centre.", "s2", 3),
        _turn("Melanie: My kids like to swim at the lake.", "s2", 4),
        _turn("Caroline: Camping by the river is my favourite thing.", "s3", 5),
    ]
    return client.post("/v1/episodes/batch", json={"items": turns}, headers=actor.h).json()["ids"]


def _search(client, actor, query: str = QUERY, **kw) -> list[dict]:
    body = {"query": query, "types": ["episode"], "k": 10, "explain": True, **kw}
    r = client.post("/v1/search", json=body, headers=actor.h)
    assert r.status_code == 200, r.text
    return r.json()["results"]


def test_spoken_by_named_matches_a_whole_first_name_in_any_case():
    who = {"a": "Caroline", "b": "Melanie", "c": "Jon", "d": "Dr Smith"}
    assert spoken_by_named("what does caroline like?", who) == {"a": 1.0}
    assert spoken_by_named("When did John call?", who) == {}  # Jon is not a word of it
    assert spoken_by_named("Did Jon and Melanie meet?", who) == {"b": 1.0, "c": 1.0}
    assert spoken_by_named("what did Dr say", who) == {"d": 1.0}
    assert spoken_by_named("anything at all", who) == {}


def test_speaker_lift_shows_in_explain_and_sums_to_the_score(client, world):
    """The named speaker's turns carry a positive `speaker` contribution, the others 0; every
    result's contributions sum to its score; Caroline's turns, which share no word with the query
    but her name, rank no lower than without the lift and one of them higher."""
    org = world.org()
    alice = world.user(org)
    ids = _conversation(client, alice)
    results = _search(client, alice)
    caroline = {ids[1], ids[3], ids[5]}
    for r in results:
        signals = r["explain"]["signals"]
        assert abs(sum(signals.values()) - r["score"]) < 1e-9, signals
        if r["id"] in caroline:
            assert signals.get("speaker", 0.0) > 0.0, signals
        else:
            assert signals.get("speaker", 0.0) == 0.0, signals
    assert results[0]["id"] in caroline
    with _tuned(client, speaker_weight=0.0):
        off = [r["id"] for r in _search(client, alice)]
    on = [r["id"] for r in results]
    moved = [(off.index(i), on.index(i)) for i in caroline if i in on and i in off]
    assert moved and all(b <= a for a, b in moved) and any(b < a for a, b in moved), (moved, [r["text"] for r in results])


def test_speaker_lift_off_is_the_ranking_without_it(client, world):
    """speaker_weight 0: no `speaker` contribution, and each result's score is its other signals'
    sum; the pool function gives the same scores as a pool without the lift at all."""
    org = world.org()
    alice = world.user(org)
    _conversation(client, alice)
    with _tuned(client, speaker_weight=0.0):
        off = _search(client, alice)
    assert off and all("speaker" not in r["explain"]["signals"] for r in off)
    on = _search(client, alice)
    assert [r["id"] for r in on] != [r["id"] for r in off]  # the lift moves this ranking

    class Row:
        def __init__(self, i, d, s, n):
            self.id, self.d, self.session_id, self.n_lex = i, d, s, n

    rows = [Row(f"t{i}", 0.1 * i, f"s{i % 2}", 3 + i) for i in range(6)]
    bare = Pool(rows=rows, bm25={"t1": 2.0, "t4": 1.0}, turns=True, pairs=[("t0", "t1")])
    lifted = replace(bare, lifts={"speaker": {"t2": 1.0, "t3": 1.0}})
    tun = replace(DEFAULT_TUNING, speaker_weight=0.0)
    assert fuse(lifted, tun, explain=True) == fuse(bare, tun, explain=True)
    assert fuse(lifted, DEFAULT_TUNING)[0] != fuse(bare, DEFAULT_TUNING)[0]


def test_speaker_lift_reads_only_the_callers_pool(client, world):
    """Another user's private turns and another org's, spoken by the same Caroline and sharing the
    query's words, never appear in the caller's results, and leave the caller's ranking and scores
    exactly as they were before those turns existed."""
    org, other_org = world.org(), world.org()
    alice, bob, eve = world.user(org), world.user(org), world.user(other_org)
    _conversation(client, alice)
    before = [(r["id"], r["score"], r["explain"]["signals"]) for r in _search(client, alice)]
    secret = [_turn(f"Caroline: On weekends I like to do secret thing {i}.", f"x{i}", 20 + i) for i in range(4)]
    theirs = set()
    for actor in (bob, eve):
        theirs |= set(client.post("/v1/episodes/batch", json={"items": secret}, headers=actor.h).json()["ids"])
    assert len(theirs) == 8
    after = [(r["id"], r["score"], r["explain"]["signals"]) for r in _search(client, alice)]
    assert not theirs & {i for i, _, _ in after}
    assert after == before
    assert any("speaker" in s for _, _, s in after)
    # The statements that bring rows and their speakers into a pool, asked for the others' turns
    # by id, or over all of time, return none of them.
    _folded_statements_serve_only_the_caller(client.app, alice, theirs)


def _folded_statements_serve_only_the_caller(app, actor, theirs: set) -> None:
    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal
    from app.search.repository import vector
    from app.search.repository.window import window_rows
    from app.search.schemas import SearchFilters

    p, f = Principal(actor.org_id, actor.user_id, actor.name, (), (), ()), SearchFilters()
    qvec = app.state.resources.embedder.embed_queries([QUERY])[0]
    with app.state.sessions() as db:
        bind_principal(db, p)
        mine = {r.id for r in window_rows(db, p, "episode", f, qvec=qvec, since=None, until=None, n=1000)}
        asked = sorted(mine | theirs)
        pooled = vector.pool_rows(db, p, "episode", qvec, asked, f)
        _, exact = vector.exact_pool(db, p, "episode", qvec, f, 1000, also_ids=asked)
        db.rollback()
    assert len(mine) == 6 and not mine & theirs
    for rows in (pooled, exact):
        assert {r.id for r in rows} == mine
        assert {r.who for r in rows} == {"Caroline", "Melanie"}
