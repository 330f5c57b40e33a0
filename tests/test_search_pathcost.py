"""One ranking's round trips: the speakers of the pool come with the statement that brings the
rows into the pool (`filters.pool_columns`). What each statement may return is tested with the
speaker lift's leak test (tests/test_search_multihop.py)."""

from __future__ import annotations

import re
from contextlib import contextmanager

from sqlalchemy import event

from tests.test_search_multihop import QUERY, _conversation


def _principal(actor):
    from app.auth.principal import Principal

    return Principal(actor.org_id, actor.user_id, actor.name, (), (), ())


@contextmanager
def _statements(engine):
    """The text of every statement sent on `engine` (side sessions included) within the block."""
    sent: list[str] = []

    def before(conn, cursor, statement, params, context, executemany):
        sent.append(statement)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", before)


def _rank(app, actor, types: tuple[str, ...]):
    from app.kit.database.db import bind_principal
    from app.search.schemas import SearchFilters
    from app.search.service import RankCall, rank

    p = _principal(actor)
    qvec = app.state.resources.embedder.embed_queries([QUERY])[0]
    with app.state.sessions() as db:
        bind_principal(db, p)
        with _statements(db.get_bind()) as sent:
            results, _ = rank(db, RankCall(principal=p, query=QUERY, qvec=qvec, types=types, filters=SearchFilters()))
        db.rollback()
    return results, sent


def test_the_speakers_come_with_the_pool_rows(client, world):
    """No statement reads the pool's speakers on its own: every statement that reads a speaker
    (`AS who`) is one that brings rows into the pool (it reads their lexeme count too), and the
    speaker lift still lifts the named speaker's turns."""
    alice = world.user(world.org())
    ids = _conversation(client, alice)
    results, sent = _rank(client.app, alice, ("episode",))
    with_who = [s for s in sent if re.search(r"\bAS who\b", s)]
    assert with_who, sent
    assert all(re.search(r"\bAS n_lex\b", s) for s in with_who), [s for s in with_who if "n_lex" not in s]
    assert str(results[0].id) in {ids[1], ids[3], ids[5]}
