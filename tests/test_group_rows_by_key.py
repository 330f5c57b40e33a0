"""`visible_to`'s group test in the form row-level security lets an index lead (migration 0036):
the same truth value as `groups && <the caller's groups>` for every row, NULLs included, and under
the service's role the caller's group rows come from `ix_<table>_group_first` by their group
instead of every group row of the org being fetched and filtered."""

from __future__ import annotations

import pytest
from sqlalchemy import and_, func, or_, select, text
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.episodes.models import Episode
from app.kit.tenancy.access import _text_array, in_groups, visible_to
from app.memories.models import Memory
from tests.test_bm25_stats import _setup

GROUPS = ["{}", "{g0}", "{gx}", "{gx,g0}", "{g0,gx}", "{gx,gy}", "{gx,gy,g1}", "{NULL}", "{NULL,g0}", "{gx,NULL,g0}", "{g0,g0}"]
CALLERS = [(), ("g0",), ("g0", "g1"), ("gz",)]


def _overlap(principal: Principal, m):
    """The rule as it was written before 0036: the plain overlap."""
    shared = or_(m.visibility == "org", and_(m.visibility == "group", m.groups.overlap(_text_array(principal.groups))))
    cleared = m.labels.contained_by(_text_array(principal.clearances))
    return and_(m.org_id == principal.org_id, or_(m.owner_id == principal.user_id, and_(shared, cleared)), m.branch_id.is_(None))


@pytest.fixture(scope="module")
def rows(admin_engine, settings):
    """An org with memories and episodes of every group shape, each visibility, owned by one user."""
    org, (alice, bob, *_), _ = _setup(admin_engine, settings)
    with admin_engine.begin() as c:
        for groups in GROUPS:
            for vis in ("group", "org", "private"):
                for labels in ("{}", "{pii}"):
                    scope = {"o": org, "u": alice, "v": vis, "g": groups, "l": labels}
                    c.execute(
                        text(
                            "INSERT INTO memories (root_id, text, kind, org_id, owner_id, visibility, groups, labels) "
                            "VALUES (gen_random_uuid(), 'pottery', 'fact', :o, :u, :v, CAST(:g AS text[]), CAST(:l AS text[]))"
                        ),
                        scope,
                    )
                    c.execute(
                        text(
                            "INSERT INTO episodes (kind, content, org_id, owner_id, visibility, groups, labels) "
                            "VALUES ('note', 'pottery', :o, :u, :v, CAST(:g AS text[]), CAST(:l AS text[]))"
                        ),
                        scope,
                    )
    return org, alice, bob


@pytest.mark.parametrize("groups", CALLERS)
def test_the_group_test_is_the_overlap_for_every_row_nulls_included(admin_engine, rows, groups):
    org, alice, bob = rows
    with Session(admin_engine) as db:
        for m in (Memory, Episode):
            assert db.scalar(select(func.count()).where(m.org_id == org)) == len(GROUPS) * 6
            g = _text_array(groups)
            assert (
                db.scalar(select(func.count()).where(m.org_id == org, in_groups(m, groups).is_distinct_from(m.groups.overlap(g))))
                == 0
            )
            for user in (alice, bob):  # the owner and another member, both with and without clearance
                for clearances in ((), ("pii",)):
                    p = Principal(org_id=org, user_id=user, name="p", roles=("member",), groups=groups, clearances=clearances)
                    new, old = visible_to(p, m), _overlap(p, m)
                    differ = select(func.count()).where(m.org_id == org, new.is_distinct_from(old))
                    assert db.scalar(differ) == 0, (m.__tablename__, groups, clearances)
                    # negated too (bm25_stats takes ~visible_to): three-valued logic must agree
                    assert db.scalar(select(func.count()).where(m.org_id == org, ~new)) == db.scalar(
                        select(func.count()).where(m.org_id == org, ~old)
                    )
                    assert db.scalar(select(func.count()).where(new)) == db.scalar(select(func.count()).where(old))


def test_under_rls_a_callers_group_rows_come_from_the_group_index(settings, rows):
    """The overlap is not leakproof, so under RLS it could never be an index condition; the first
    group's equality is (fails with the plain overlap: no `groups[1]` index condition)."""
    from app.kit.database.db import bind_principal, make_engine
    from app.kit.database.pg import app_url
    from app.search.repository.filters import servable
    from app.search.schemas import SearchFilters

    org, _alice, bob = rows
    p = Principal(org_id=org, user_id=bob, name="bob", roles=("member",), groups=("g0",), clearances=())
    eng = make_engine(app_url(settings), pool_size=1)
    try:
        with Session(eng) as db:
            bind_principal(db, p)
            db.execute(text("SET LOCAL enable_seqscan = off"))
            for t, m in (("episode", Episode), ("memory", Memory)):
                stmt = select(m.id).where(*servable(p, t, SearchFilters()))
                sql = str(stmt.compile(db.get_bind(), compile_kwargs={"literal_binds": True}))
                plan = "\n".join(db.execute(text("EXPLAIN " + sql)).scalars())
                assert "groups[1] = ANY" in plan and "Index Cond" in plan, plan
                # bob (in g0, no clearance, owns nothing) sees each unlabelled org row and the
                # unlabelled group rows of g0
                assert len(db.execute(stmt).all()) == len(GROUPS) + sum("g0" in g for g in GROUPS), t
    finally:
        eng.dispose()
