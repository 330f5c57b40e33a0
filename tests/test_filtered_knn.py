"""ACL-filtered kNN in every scan mode (app/search/repository/vector.py `vector_ids`): the same rows as the
exact filtered search, never a short result while more visible rows exist, nothing invisible."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.helpers import count


@pytest.fixture(scope="module")
def corpus(admin_engine, embedder, settings):
    """400 memories of one org owned by a writer: 40 shared with group `few`, the rest with `many`."""
    import random

    from sqlalchemy.orm import Session

    from app.orgs import service as orgs
    from bench.speed.service.data import sentence

    rng = random.Random(4)
    texts = [sentence(rng) for _ in range(400)]
    vecs = embedder.embed(texts)
    with Session(admin_engine, info={"audit_key": settings.audit_secret()}) as db:
        org = orgs.create_org(db, f"knn-{rng.randrange(10**9)}")
        writer = orgs.create_user(db, org, "writer")
        few = orgs.create_user(db, org, "few", groups=["few"])
        many = orgs.create_user(db, org, "many", groups=["many"])
        outsider = orgs.create_user(db, orgs.create_org(db, f"other-{rng.randrange(10**9)}"), "outsider", groups=["few", "many"])
        for i, (t, v) in enumerate(zip(texts, vecs)):
            db.execute(
                text(
                    "INSERT INTO memories (root_id, text, kind, org_id, owner_id, visibility, groups, embedding)"
                    " VALUES (gen_random_uuid(), :t, 'fact', :o, :w, 'group', :g, CAST(:e AS vector))"
                ),
                {
                    "t": t,
                    "o": org.id,
                    "w": writer.id,
                    "g": ["few"] if i % 10 == 0 else ["many"],
                    "e": "[" + ",".join(f"{x:.6f}" for x in v) + "]",
                },
            )
        db.commit()
        people = {
            u.name: (org.id if u is not outsider else outsider.org_id, u.id, tuple(u.groups)) for u in (few, many, outsider)
        }
    assert count(admin_engine, "memories", org.id) == 400
    return people, embedder.embed(["the payment api latency spiked", "rotated the credentials at 3am"])


@pytest.mark.parametrize("mode", ["auto", "ef", "relaxed", "strict", "exact"])
@pytest.mark.parametrize("who,visible", [("few", 40), ("many", 360), ("outsider", 0)])
def test_every_mode_returns_the_exact_visible_top_k(app, client, corpus, mode, who, visible):
    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal
    from app.search import repository as repo
    from app.search.schemas import SearchFilters

    people, queries = corpus
    org_id, uid, groups = people[who]
    p = Principal(org_id=org_id, user_id=uid, name=who, roles=("member",), groups=groups, clearances=())
    for q in queries:
        for n in (10, 100):
            with app.state.sessions() as db:
                bind_principal(db, p)
                got, _ = repo.vector_ids(db, p, "memory", q, SearchFilters(), n, ef_search=40, mode=mode)
                truth, _ = repo.vector_ids(db, p, "memory", q, SearchFilters(), n, ef_search=40, mode="exact")
                db.rollback()
            assert len(got) == min(n, visible)  # never short while more visible rows exist
            assert [r.d for r in got] == sorted(r.d for r in got)
            if mode == "exact" or len(truth) < n:  # fewer visible rows than asked: the exact search answers
                assert [r.id for r in got] == [r.id for r in truth]
            elif truth:  # graph walks are approximate
                assert len({r.id for r in got} & {r.id for r in truth}) / len(truth) >= 0.9
