"""The org's vocabulary and the vocabulary lift (app/search/lexicon.py): written at ingest, read
only through the caller's own servable rows, gone with the last row that held a word."""

from __future__ import annotations

from sqlalchemy import text

from tests.helpers import ep
from tests.test_search_ranking import _tuned


def _turn(content: str, session: str, minute: int, **kw) -> dict:
    return {
        "kind": "conversation",
        "content": content,
        "session_id": session,
        "occurred_at": f"2023-05-08T13:{minute:02d}:00Z",
        "visibility": "private",
        **kw,
    }


def _words(admin_engine, org_id) -> dict[str, str]:
    with admin_engine.connect() as c:
        return dict(c.execute(text("SELECT lexeme, word FROM lexicon WHERE org_id = :o"), {"o": org_id}).all())


def _search(client, actor, query: str, **kw) -> list[tuple[str, float]]:
    body = {"query": query, "types": ["episode"], "k": 10, **kw}
    return [(x["id"], x["score"]) for x in client.post("/v1/search", json=body, headers=actor.h).json()["results"]]


def test_ingest_embeds_each_new_word_once(client, world, admin_engine):
    """A stored episode's words enter its org's vocabulary once per lexeme (stop words and words
    of several lexemes stay out); words already known are not embedded again; another org's
    vocabulary is its own."""
    org, other = world.org(), world.org()
    alice, mallory = world.user(org), world.user(other)
    client.post("/v1/episodes", json=ep("Pottery classes: the pottery teacher fired our bowls in the kiln"), headers=alice.h)
    words = _words(admin_engine, alice.org_id)
    assert {"potteri", "teacher", "kiln", "bowl", "fire", "class"} <= set(words) and "the" not in words
    assert words["potteri"] == "pottery" and words["bowl"] in ("bowls", "bowl")
    with admin_engine.connect() as c:
        dims = (
            c.execute(text("SELECT DISTINCT vector_dims(embedding) FROM lexicon WHERE org_id = :o"), {"o": alice.org_id})
            .scalars()
            .all()
        )
    assert dims == [384]
    client.post("/v1/episodes/batch", json={"items": [ep("the kiln again"), ep("a glaze for the kiln")]}, headers=alice.h)
    after = _words(admin_engine, alice.org_id)
    assert set(after) - set(words) == {"glaze"} and after["kiln"] == words["kiln"]
    assert _words(admin_engine, mallory.org_id) == {}


def test_the_lift_finds_a_turn_through_a_word_near_the_query(client, world, app):
    """Asked for a category, the lift lifts the turn that names an instance of it (the turn
    shares no word with the question), and only with the lift on."""
    org = world.org()
    alice = world.user(org)
    filler = [
        "Dana: does anyone want to play cards tonight?",
        "Dana: I play chess with my brother on Mondays",
        "Dana: my cat knocked over the plants again",
        "Dana: we ate pasta and watched a film",
        "Dana: does the bakery open early on Sundays?",
        "Dana: I finally fixed the leaking tap",
        "Dana: play time for the kids is after lunch",
        "Dana: the weather does not look good",
        "Dana: I painted the fence blue",
        "Dana: my sister visits next week",
    ]
    target = "Dana: every evening I practise the cello, and at weekends the violin"
    items = [_turn(t, f"s{i % 4}", i) for i, t in enumerate(filler)] + [_turn(target, "s9", 30)]
    ids = client.post("/v1/episodes/batch", json={"items": items}, headers=alice.h).json()["ids"]
    q = "Which musical instruments does Dana play?"
    with_lift = [i for i, _ in _search(client, alice, q)]
    with _tuned(client, vocab_terms=0):
        without = [i for i, _ in _search(client, alice, q)]
    assert with_lift.index(ids[-1]) < without.index(ids[-1])


def test_the_lift_never_uses_words_the_caller_may_not_be_served(client, world, admin_engine):
    """Another user's private turn and a quarantined turn of the caller's own hold the words
    nearest to the question: the caller's results and scores stay exactly as they were (the
    candidate words, their df and N come from the caller's servable rows only)."""
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    mine = [
        _turn("Dana: I practise the cello every evening", "s1", 0),
        _turn("Dana: we ate pasta", "s1", 1),
        _turn("Dana: the film was long", "s2", 5),
        _turn("Dana: I play chess on Mondays", "s2", 6),
    ]
    client.post("/v1/episodes/batch", json={"items": mine}, headers=alice.h)
    q = "Which musical instruments does Dana play?"
    before = _search(client, alice, q)
    client.post(
        "/v1/episodes/batch",
        json={
            "items": [
                _turn("Bob: saxophone, clarinet, trumpet, piano and drums", "s1", 2),
                _turn("Bob: my guitar and my ukulele", "s2", 7),
            ]
        },
        headers=bob.h,
    )
    hidden = client.post(
        "/v1/episodes", json=_turn("Dana: the harp and the flute and the oboe", "s1", 3), headers=alice.h
    ).json()["id"]
    with admin_engine.begin() as c:
        c.execute(text("UPDATE episodes SET quality = 'quarantined' WHERE id = :i"), {"i": hidden})
    assert {"saxophon", "harp", "guitar"} <= set(_words(admin_engine, alice.org_id))  # in the org's vocabulary
    assert _search(client, alice, q) == before and len(before) == 4


def test_erasure_takes_the_words_only_the_erased_rows_held(client, world, admin_engine):
    """Deleting an episode, or forgetting a user, removes the vocabulary words no remaining row
    holds; a word another user's row still holds stays."""
    org = world.org()
    admin, alice, bob = world.user(org, roles=("admin",)), world.user(org), world.user(org)
    e = client.post("/v1/episodes", json=ep("Zanzibar spice farm tour"), headers=alice.h).json()["id"]
    client.post("/v1/episodes", json=ep("a marimba lesson on Thursday"), headers=alice.h)
    client.post("/v1/episodes", json=ep("the spice market was crowded"), headers=bob.h)
    assert {"zanzibar", "farm", "spice", "marimba", "market"} <= set(_words(admin_engine, alice.org_id))
    r = client.delete(f"/v1/episodes/{e}", headers=alice.h)
    job = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=alice.h).json()
    words = set(_words(admin_engine, alice.org_id))
    assert job["stats"]["vocabulary_words_removed"] >= 3 and not {"zanzibar", "farm", "tour"} & words
    assert {"spice", "marimba", "market"} <= words
    r = client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h)
    assert r.status_code == 202
    words = set(_words(admin_engine, alice.org_id))
    assert "marimba" not in words and "lesson" not in words and {"spice", "market", "crowd"} <= words
