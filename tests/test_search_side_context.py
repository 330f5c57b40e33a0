"""Context retrieval ranks its three item types at once on side sessions bound like the request's
session (app/search/repository/sessions.py `at_once`), with byte-identical pieces to ranking them
one after the other, and in its own session when its transaction has written."""

from __future__ import annotations

import random

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session


def _vec(rs, centers) -> str:
    v = centers[rs.integers(0, len(centers))] + rs.normal(0, 0.25, centers.shape[1])
    return "[" + ",".join(f"{x:.6f}" for x in v / np.linalg.norm(v)) + "]"


@pytest.fixture(scope="module")
def org(admin_engine, settings):
    """An org of 300 memories (some rules), 40 conversations of 8 turns and 80 knowledge chunks,
    private / group / org, and a reader in one group and a reader in none."""
    from app.orgs import service as orgs
    from bench.speed.service.data import sentence

    rng, rs = random.Random(11), np.random.default_rng(11)
    centers = rs.normal(0, 1, (8, 384))
    with Session(admin_engine, info={"audit_key": settings.audit_secret()}) as db:
        o = orgs.create_org(db, f"side-context-{rng.randrange(10**9)}")
        users = [orgs.create_user(db, o, "none"), orgs.create_user(db, o, "g1", groups=["g1"])]
        db.flush()
        asset = db.execute(
            text(
                "INSERT INTO knowledge_assets (org_id, owner_id, kind, source_uri, content_hash, visibility)"
                " VALUES (:o, :u, 'document', 'mem://side', 'side', 'org') RETURNING id"
            ),
            {"o": o.id, "u": users[0].id},
        ).scalar_one()

        def acl(i: int) -> dict:
            vis = ("private", "group", "org")[i % 3]
            return {"o": o.id, "u": users[i % 2].id, "v": vis, "g": ["g1"] if vis == "group" else [], "e": _vec(rs, centers)}

        db.execute(
            text(
                "INSERT INTO memories (org_id, root_id, owner_id, visibility, groups, kind, text, embedding)"
                " VALUES (:o, gen_random_uuid(), :u, :v, :g, :k, :t, CAST(:e AS vector))"
            ),
            [{**acl(i), "k": "rule" if i % 10 == 0 else "fact", "t": sentence(rng)} for i in range(300)],
        )
        db.execute(
            text(
                "INSERT INTO episodes (org_id, owner_id, visibility, groups, kind, content, session_id, occurred_at,"
                " embedding) VALUES (:o, :u, :v, :g, 'conversation', :t, :s,"
                " now() - make_interval(mins => :m), CAST(:e AS vector))"
            ),
            [{**acl(s), "t": sentence(rng), "s": f"s{s}", "m": 1000 - 10 * s - j} for s in range(40) for j in range(8)],
        )
        db.execute(
            text(
                "INSERT INTO chunks (org_id, asset_id, owner_id, visibility, groups, ord, text, content_hash,"
                " token_count, embedding) VALUES (:o, :a, :u, :v, :g, :i, :t, md5(:t), 10, CAST(:e AS vector))"
            ),
            [{**acl(i), "a": asset, "i": i, "t": sentence(rng)} for i in range(80)],
        )
        db.commit()
        people = {u.name: (o.id, u.id, tuple(u.groups)) for u in users}
    queries = [[float(x) for x in _vec(rs, centers).strip("[]").split(",")] for _ in range(5)]
    return people, queries


@pytest.fixture(scope="module")
def sessions(settings):
    from app.kit.database.db import make_engine, make_sessionmaker
    from app.kit.database.pg import app_url

    eng = make_engine(app_url(settings), pool_size=4)
    yield make_sessionmaker(eng)
    eng.dispose()


def _principal(people, who):
    from app.auth.principal import Principal

    org_id, uid, groups = people[who]
    return Principal(org_id=org_id, user_id=uid, name=who, roles=("member",), groups=groups, clearances=())


def _pieces(sessions, p, words, q, *, side: bool, filters=None):
    from app.context.service import candidates, retrieved_pieces
    from app.kit.database.db import bind_principal
    from app.search.repository import sessions as side_sessions
    from app.search.schemas import SearchFilters
    from app.search.service import RankCall

    held = 0
    while not side and side_sessions.SIDE.acquire(blocking=False):  # no side connection free
        held += 1
    try:
        with sessions() as db:
            bind_principal(db, p)
            call = RankCall(
                principal=p,
                query=words,
                qvec=np.array(q),
                k=candidates(2000),
                second_round=True,
                filters=filters or SearchFilters(),
            )
            got = retrieved_pieces(db, call, session_id="s3")
            db.rollback()
    finally:
        for _ in range(held):
            side_sessions.SIDE.release()
    return [(x.section, x.type, x.id, x.text, x.score, sorted(x.extra.items())) for x in got]


@pytest.mark.parametrize("who", ["none", "g1"])
def test_context_ranks_its_types_on_side_sessions_with_the_same_pieces(org, sessions, monkeypatch, who):
    from app.context import service as context
    from app.search.repository import sessions as side_sessions
    from app.search.schemas import SearchFilters

    people, queries = org
    p = _principal(people, who)
    now = context.now_utc()
    monkeypatch.setattr(context, "now_utc", lambda: now)  # recency weighs pieces: one clock for both runs
    aside = []
    original = side_sessions._aside
    monkeypatch.setattr(side_sessions, "_aside", lambda *a: aside.append(1) or original(*a))
    words = ("deploy cache", "payment latency rotated", "credentials", "the api disk full", "alert")
    sections, neighbours = set(), 0
    for q, w in zip(queries, words):
        for filters in (None, SearchFilters(kinds=["fact", "conversation"])):
            before = len(aside)
            at_once = _pieces(sessions, p, w, q, side=True, filters=filters)
            assert len(aside) == before + 2  # episodes and chunks ranked on side sessions
            one_by_one = _pieces(sessions, p, w, q, side=False, filters=filters)
            assert len(aside) == before + 2
            assert at_once == one_by_one
            sections |= {s for s, *_ in at_once}
            neighbours += sum(1 for *_, extra in at_once if dict(extra).get("neighbour_of"))
    assert sections == {"memories", "instructions", "examples", "knowledge"}  # every type answered
    assert neighbours > 0  # the neighbour pieces (from the episode ranking's pairs) are compared too


def test_context_after_a_write_ranks_in_its_own_session(org, sessions, monkeypatch):
    from app.context.service import candidates, retrieved_pieces
    from app.kit.database.db import bind_principal
    from app.search.repository import sessions as side_sessions
    from app.search.service import RankCall

    people, queries = org
    p = _principal(people, "g1")
    aside = []
    original = side_sessions._aside
    monkeypatch.setattr(side_sessions, "_aside", lambda *a: aside.append(1) or original(*a))
    with sessions() as db:
        bind_principal(db, p)
        db.execute(
            text(
                "INSERT INTO memories (org_id, root_id, owner_id, visibility, kind, text, embedding)"
                " VALUES (:o, gen_random_uuid(), :u, 'private', 'fact', 'zyxwv written just now', CAST(:e AS vector))"
            ),
            {"o": p.org_id, "u": p.user_id, "e": "[" + ",".join(map(str, queries[0])) + "]"},
        )
        got = retrieved_pieces(db, RankCall(principal=p, query="zyxwv", qvec=np.array(queries[0]), k=candidates(2000)))
        db.rollback()
    assert aside == []
    assert any(x.text == "zyxwv written just now" for x in got)
