"""The vector stage in two parts for a caller in no group (the org-visible rows walked on their
partial HNSW index, the caller's own rows searched exactly; callers in groups walk the full graph)
returns the exact filtered top k, and the per-type
stages of a hybrid ranking run on side connections with the same answer as one after the other."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

GROUPS = ("g1", "g2", "g3", "g4")


def _vec(rs, centers) -> str:
    v = centers[rs.integers(0, len(centers))] + rs.normal(0, 0.25, centers.shape[1])
    return "[" + ",".join(f"{x:.6f}" for x in v / np.linalg.norm(v)) + "]"


@pytest.fixture(scope="module")
def org(admin_engine, settings):
    """An org of 900 memories and 600 episodes (private / group / org, some org rows labelled), a
    knowledge asset's 200 chunks, and another org holding the same groups and similar rows."""
    from app.orgs import service as orgs
    from bench.speed.service.data import sentence

    rng, rs = random.Random(8), np.random.default_rng(8)
    centers = rs.normal(0, 1, (12, 384))
    people = {}
    with Session(admin_engine, info={"audit_key": settings.audit_secret()}) as db:
        out = {}
        for name, n_mem in (("main", 900), ("other", 300)):
            o = orgs.create_org(db, f"split-{name}-{rng.randrange(10**9)}")
            users = [
                orgs.create_user(db, o, "none"),
                orgs.create_user(db, o, "g1", groups=["g1"]),
                orgs.create_user(db, o, "g123", groups=["g1", "g2", "g3"], clearances=["secret"]),
                orgs.create_user(db, o, "hoarder"),
            ]
            db.flush()
            asset = db.execute(
                text(
                    "INSERT INTO knowledge_assets (org_id, owner_id, kind, source_uri, content_hash, visibility)"
                    " VALUES (:o, :u, 'document', 'mem://doc', 'h', 'org') RETURNING id"
                ),
                {"o": o.id, "u": users[0].id},
            ).scalar_one()
            for type_, n in (("memory", n_mem), ("episode", 2 * n_mem // 3), ("chunk", 200)):
                rows = []
                for i in range(n):
                    r = rs.random()
                    vis = "private" if r < 0.4 else "group" if r < 0.7 else "org"
                    owner = users[3] if vis == "private" and rs.random() < 0.7 else users[int(rs.integers(0, 4))]
                    rows.append(
                        {
                            "o": o.id,
                            "u": owner.id,
                            "v": vis,
                            "e": _vec(rs, centers),
                            "t": sentence(rng),
                            "i": i,
                            "g": [GROUPS[int(rs.integers(0, 4))]] if vis == "group" else [],
                            "l": ["secret"] if vis != "private" and rs.random() < 0.1 else [],
                            "a": asset,
                        }
                    )
                sql = {
                    "memory": "INSERT INTO memories (org_id, root_id, owner_id, visibility, groups, labels, kind, text,"
                    " embedding) VALUES (:o, gen_random_uuid(), :u, :v, :g, :l, 'fact', :t, CAST(:e AS vector))",
                    "episode": "INSERT INTO episodes (org_id, owner_id, visibility, groups, labels, kind, content,"
                    " embedding) VALUES (:o, :u, :v, :g, :l, 'note', :t, CAST(:e AS vector))",
                    "chunk": "INSERT INTO chunks (org_id, asset_id, owner_id, visibility, groups, labels, ord, text,"
                    " content_hash, token_count, embedding)"
                    " VALUES (:o, :a, :u, :v, :g, :l, :i, :t, md5(:t), 10, CAST(:e AS vector))",
                }
                db.execute(text(sql[type_]), rows)
            out[name] = (o.id, users)
        db.commit()
        for name, (oid, users) in out.items():
            for u in users:
                people[(name, u.name)] = (oid, u.id, tuple(u.groups), tuple(u.clearances))
    queries = [[float(x) for x in _vec(rs, centers).strip("[]").split(",")] for _ in range(6)]
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

    org_id, uid, groups, clearances = people[who]
    return Principal(org_id=org_id, user_id=uid, name=who[1], roles=("member",), groups=groups, clearances=clearances)


@pytest.mark.parametrize(
    "who", [("main", "none"), ("main", "g1"), ("main", "g123"), ("main", "hoarder"), ("other", "g123"), ("other", "none")]
)
@pytest.mark.parametrize("type_", ["memory", "episode", "chunk"])
def test_split_returns_the_exact_filtered_top_k_and_nothing_else(org, sessions, admin_engine, who, type_):
    from app.kit.database.db import bind_principal
    from app.kit.registry import ITEM_TYPES
    from app.kit.tenancy.access import can_see
    from app.search import repository as repo
    from app.search.schemas import SearchFilters

    people, queries = org
    p = _principal(people, who)
    table = ITEM_TYPES[type_].model.__table__.name
    for f in (SearchFilters(), SearchFilters(visibility=["group", "private"]), SearchFilters(labels=["secret"])):
        for q in queries:
            for n in (10, 100):
                with sessions() as db:
                    bind_principal(db, p)
                    got, _ = repo.vector_ids(db, p, type_, np.array(q), f, n, ef_search=40, mode="split")
                    truth, _ = repo.vector_ids(db, p, type_, np.array(q), f, n, ef_search=40, mode="exact")
                    db.rollback()
                if not p.groups:  # the split: the org part's walk and the own rows' exact search
                    assert [r.id for r in got] == [r.id for r in truth], (who, type_, f, n)
                else:  # a caller in groups: the full graph's walk as before (tests/test_filtered_knn.py), approximate
                    assert len({r.id for r in got} & {r.id for r in truth}) >= 0.9 * len(truth), (who, type_, f, n)
                if not got:
                    continue
                with admin_engine.connect() as c:  # every row returned is the caller's to see
                    rows = c.execute(
                        text(
                            f"SELECT org_id, owner_id, visibility, groups, labels FROM {table}"
                            " WHERE id = ANY(CAST(:ids AS uuid[]))"
                        ),
                        {"ids": [r.id for r in got]},
                    ).all()
                assert len(rows) == len(got)
                assert all(
                    can_see(p, org_id=r.org_id, owner_id=r.owner_id, visibility=r.visibility, groups=r.groups, labels=r.labels)
                    for r in rows
                )


def test_the_org_bucket_is_walked_on_its_partial_index(org, sessions):
    """For a caller in no group the org part's statement takes the partial HNSW index (and not the
    full one): the walk never meets a private or group row."""
    from app.kit.database.db import bind_principal
    from app.search import repository as repo
    from app.search.schemas import SearchFilters

    people, queries = org
    p = _principal(people, ("main", "none"))
    with sessions() as db:
        bind_principal(db, p)
        repo.vector_ids(db, p, "memory", np.array(queries[0]), SearchFilters(), 10, ef_search=40, mode="split")
        used = dict(
            db.execute(
                text(
                    "SELECT parent.relname, sum(pg_stat_get_xact_numscans(i.inhrelid)) FROM pg_inherits i"
                    " JOIN pg_class parent ON parent.oid = i.inhparent WHERE parent.relname LIKE 'ix_memories_embedding%'"
                    " GROUP BY parent.relname"
                )
            ).all()
        )
        db.rollback()
    assert used.get("ix_memories_embedding_org_hnsw", 0) >= 1
    assert used.get("ix_memories_embedding_hnsw", 0) == 0


@pytest.mark.parametrize("who", [("main", "none"), ("main", "g123"), ("main", "hoarder")])
def test_all_types_concurrently_rank_as_one_after_the_other(org, sessions, monkeypatch, who):
    from app.kit.database.db import bind_principal
    from app.search import service
    from app.search.service import RankCall, rank
    from app.search.tuning import DEFAULT_TUNING

    people, queries = org
    p = _principal(people, who)
    tuning = replace(DEFAULT_TUNING, exact_below=50)  # the split vector stage, not the small-org exact one
    aside, types = [], set()
    original = service._fuse_aside
    monkeypatch.setattr(service, "_fuse_aside", lambda *a: aside.append(a[-1]) or original(*a))
    for q, words in zip(queries, ("deploy cache", "payment latency", "credentials rotated", "the api", "disk full", "alert")):
        results = {}
        for how in ("concurrent", "sequential"):
            held = 0
            if how == "sequential":  # no side connection free: every type runs in the ranking's session
                while service._SIDE.acquire(blocking=False):
                    held += 1
            try:
                with sessions() as db:
                    bind_principal(db, p)
                    got, info = rank(db, RankCall(principal=p, query=words, qvec=np.array(q), k=20, tuning=tuning))
                    db.rollback()
            finally:
                for _ in range(held):
                    service._SIDE.release()
            results[how] = ([(r.type, r.id, r.score) for r in got], info["exact_fallbacks"])
        assert results["concurrent"] == results["sequential"]
        types |= {t for t, _, _ in results["concurrent"][0]}
    assert types == {"memory", "episode", "chunk"}  # every type's stage answered
    assert set(aside) == {"episode", "chunk"}  # the types after the first ran on side connections


def test_a_transaction_that_wrote_ranks_in_its_own_session(org, sessions, monkeypatch):
    from app.kit.database.db import bind_principal
    from app.search import service
    from app.search.service import RankCall, rank

    people, queries = org
    p = _principal(people, ("main", "g1"))
    aside = []
    original = service._fuse_aside
    monkeypatch.setattr(service, "_fuse_aside", lambda *a: aside.append(a[-1]) or original(*a))
    with sessions() as db:
        bind_principal(db, p)
        db.execute(
            text(
                "INSERT INTO memories (org_id, root_id, owner_id, visibility, kind, text, embedding)"
                " VALUES (:o, gen_random_uuid(), :u, 'private', 'fact', 'zyxwv unseen elsewhere', CAST(:e AS vector))"
            ),
            {"o": p.org_id, "u": p.user_id, "e": "[" + ",".join(map(str, queries[0])) + "]"},
        )
        got, _ = rank(db, RankCall(principal=p, query="zyxwv", qvec=np.array(queries[0]), k=5))
        db.rollback()
    assert aside == []
    assert got and got[0].text == "zyxwv unseen elsewhere"
