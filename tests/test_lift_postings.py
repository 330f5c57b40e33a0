"""The vocabulary lift's rows from the postings of the caller's buckets
(app/search/repository/lexicon.py `lift_rows`): the same rows, order and scores, bit-equal, as
the statement over the item table (`lift_hits_select`), for callers of random groups and
clearances and owners of rows in groups they are not in; no item row read but the joining
rows'; rows a caller cannot see never change their lift."""

from __future__ import annotations

import random

import numpy as np
import pytest
from sqlalchemy import event, text

from app.search.schemas import SearchFilters
from tests.test_bm25_stats import GROUPS, LABELS, _principal, unseen_rows
from tests.test_bm25_stats import seeded as _seeded  # noqa: F401  (the fixture)

DIM = 384


def _unit(rng: random.Random) -> np.ndarray:
    v = np.array([rng.gauss(0, 1) for _ in range(DIM)], dtype=np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture(scope="module")
def lexicon(_seeded, admin_engine):  # noqa: F811  (the imported fixture)
    """test_bm25_stats's seeded org (org, users), with its vocabulary (each word's lexeme with a
    random embedding) and most of its turns embedded."""
    org, _ = _seeded
    rng = random.Random(11)
    with admin_engine.begin() as c:
        lexemes = c.execute(
            text("SELECT DISTINCT l FROM episodes, unnest(tsvector_to_array(tsv)) l WHERE org_id = :o"), {"o": org}
        ).scalars()
        for lex in lexemes:
            c.execute(
                text("INSERT INTO lexicon (org_id, lexeme, word, embedding) VALUES (:o, :l, :l, CAST(:e AS vector))"),
                {"o": org, "l": lex, "e": str([float(x) for x in _unit(rng)])},
            )
        for k in range(3):  # three quarters of the turns embedded (their cosine is a pool column), one not
            c.execute(
                text(
                    "UPDATE episodes SET embedding = CAST(:e AS vector) WHERE org_id = :o AND get_byte(uuid_send(id), 0) % 4 = :k"
                ),
                {"o": org, "k": k, "e": str([float(x) for x in _unit(rng)])},
            )
    return _seeded


def _pool(app, p, rng: random.Random) -> list[str]:
    """Some of the caller's servable turns, as a fusion pool would hold them."""
    from app.kit.database.db import bind_principal

    with app.state.sessions() as db:
        bind_principal(db, p)
        ids = db.execute(text("SELECT id::text FROM episodes WHERE org_id = :o ORDER BY id"), {"o": p.org_id}).scalars().all()
        db.rollback()
    return rng.sample(ids, min(len(ids), 40))


def _lifts(app, p, qvec, pool, *, n, depth, reset_odd=False, f=None, odd=None):
    """(lift_rows, the item table's statement, the statements lift_rows sent, N), under filters
    `f` (default: none); `odd`: a list to append whether `caller_stats` saw odd rows to."""
    f = f or SearchFilters()
    from app.kit.database.db import bind_principal
    from app.search.repository import bm25_stats, lexicon

    call = {"qvec": qvec, "own": [], "pool": pool, "terms": 5, "min_sim": -1.0}
    with app.state.sessions() as db:
        bind_principal(db, p)
        total, _ = bm25_stats.caller_stats(db, p, "episode", ["potteri"])
        if odd is not None:
            odd.append(db.info["bm25_odd"][(str(p.user_id), "episode")])
        if reset_odd:  # as if caller_stats had not run: the owner's copies are read
            db.info.pop("bm25_odd")
        sent: list = []
        conn = db.connection()
        keep = lambda *a: sent.append(a[2])  # noqa: E731
        event.listen(conn, "before_cursor_execute", keep)
        got = lexicon.lift_rows(db, p, f, total=total, n=n, depth=depth, **call)
        event.remove(conn, "before_cursor_execute", keep)
        words = db.execute(lexicon._lift_words(p, f), call).all()
        quoted = [lexicon.tsquery_lexeme(w.lex) for w in words]
        old = db.execute(
            lexicon.lift_hits_select(p, f),
            {
                "qvec": qvec,
                "lexes": [w.lex for w in words],
                "sims": [float(w.sim) for w in words],
                "tsq": quoted,
                "any": " | ".join(quoted),
                "total": total,
                "n": n,
            },
        ).all()
        db.rollback()
    return [tuple(r) for r in got], [tuple(r) for r in old], sent, total


@pytest.mark.parametrize("n, depth", [(1000, 30), (40, 10)])
def test_the_postings_lift_equals_the_item_tables(app, lexicon, n, depth):
    org, users = lexicon
    rng = random.Random(n)
    odd: list = []
    for i in range(12):  # readers of random groups and clearances; writers who own rows they cannot see
        p = (
            _principal(org, users[6 + i % 3], rng.sample(GROUPS, rng.randint(0, 2)), rng.sample(LABELS, rng.randint(0, 1)))
            if i % 2
            else _principal(org, users[i % 6], rng.sample(GROUPS, rng.randint(0, 1)), LABELS)
        )
        qvec = _unit(rng)
        got, old, sent, _ = _lifts(app, p, qvec, _pool(app, p, rng), n=n, depth=depth, reset_odd=i % 4 == 0, odd=odd)
        assert len(old) >= min(n, depth + 1)  # a lift with rows past the joining ones
        assert [(r[0], repr(r[-1])) for r in got] == [(r[0], repr(r[-1])) for r in old]  # ids, order, scores bit-equal
        assert got[:depth] == old[:depth]  # the joining rows with every pool column
        assert any(r[1] is not None for r in got[:depth])
        assert all(r[1:5] == (None,) * 4 for r in got[depth:]) and all(r[3] is not None for r in got[:depth])
        hits = [s for s in sent if "bm25_postings" in s]
        assert len(hits) == 1 and "@@" not in hits[0] and len(sent) == 2  # the words, then the postings
    assert True in odd and False in odd  # some callers own rows no visible bucket gives them


def test_a_read_the_postings_do_not_serve_takes_the_item_tables_statement(app, lexicon):
    """A filter below a bucket (here: a kind): the statement over the item table, every row loaded."""
    org, users = lexicon
    rng = random.Random(5)
    p = _principal(org, users[0], ["a"], LABELS)
    got, old, sent, _ = _lifts(app, p, _unit(rng), _pool(app, p, rng), n=1000, depth=30, f=SearchFilters(kinds=["note"]))
    assert got == old and len(got) > 30 and all(r[3] is not None for r in got)  # n_lex: every row read
    assert not any("bm25_postings" in s for s in sent) and any("@@" in s for s in sent)


def test_rows_a_caller_cannot_see_never_change_their_lift(app, admin_engine, settings, lexicon):
    org, users = lexicon
    p = _principal(org, users[6], groups=["a"])
    rng = random.Random(3)
    calls = [(_unit(rng), _pool(app, p, rng)) for _ in range(3)]
    before = [_lifts(app, p, q, pool, n=1000, depth=30) for q, pool in calls]
    other = unseen_rows(admin_engine, settings, org, users[7], types=("episode",))
    with admin_engine.connect() as c:  # in the postings the lift reads, in both orgs
        posted = c.execute(
            text(
                "SELECT p.org_id, count(DISTINCT p.id) FROM bm25_postings p JOIN bm25_bucket_ids i"
                " ON i.org_id = p.org_id AND i.bid = p.bid "
                "WHERE i.item_type = 'episode' AND i.bucket = 'g:{c}|{}' GROUP BY 1"
            )
        ).all()
    assert {o: k for o, k in posted if o in (org, other)} == {org: 10_000, other: 10_000}  # in the postings read
    after = [_lifts(app, p, q, pool, n=1000, depth=30) for q, pool in calls]
    assert repr([(got, total) for got, _, _, total in after]) == repr([(got, total) for got, _, _, total in before])
    assert all(got[:30] == old[:30] and len(got) > 30 for got, old, _, _ in after)
