"""Migrations are the only way the schema changes; RLS and the audit log hold in the database."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from app.kit.database.migrate import include_object as _include_object
from app.kit.database.pg import app_url
from app.kit.registry import metadata
from tests.helpers import scratch_database
from tests.test_vectors_in_row import STORED


def test_models_and_migrations_agree(admin_engine):
    with admin_engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "include_object": _include_object})
        diff = compare_metadata(ctx, metadata)
    assert diff == [], diff


# Migration 0035: (the tables that store item rows, how many of them are kept whole)
WHOLE_ROWS = "SELECT count(*), count(*) FILTER (WHERE reloptions = ARRAY['toast_tuple_target=8160']) FROM (" + STORED + ") s"


def test_downgrade_then_upgrade(settings, admin_engine):
    from alembic.script import ScriptDirectory

    from app.kit.database.migrate import alembic_config, downgrade, upgrade

    with scratch_database(settings, "memscale_migtest") as (s, eng):
        upgrade(s, "head")
        downgrade(s, "0034")  # 0035's downgrade: the item tables' storage parameter reset
        with eng.connect() as c:
            tables, whole = c.execute(text(WHOLE_ROWS)).one()
            assert tables > 16 and whole == 0
        upgrade(s, "0035")
        with eng.connect() as c:
            assert c.execute(text(WHOLE_ROWS)).one() == (tables, tables)
        downgrade(s, "base")
        with eng.connect() as c:
            left = c.execute(
                text("SELECT count(*) FROM pg_tables WHERE schemaname='public' AND tablename <> 'alembic_version'")
            ).scalar()
        assert left == 0
        upgrade(s, "head")
        with eng.connect() as c:
            head = ScriptDirectory.from_config(alembic_config(s)).get_current_head()
            assert c.execute(text("SELECT version_num FROM alembic_version")).scalar() == head
            assert c.execute(text("SELECT count(*) FROM episodes")).scalar() == 0


def test_service_role_is_neither_superuser_nor_bypassrls(settings):
    eng = create_engine(app_url(settings))
    with eng.connect() as c:
        row = c.execute(text("SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")).one()
    eng.dispose()
    assert row == ("memscale_app", False, False)


def test_session_without_tenant_setting_sees_no_rows(settings, client, world):
    from tests.helpers import ep

    org = world.org()
    alice = world.user(org)
    assert client.post("/v1/episodes", json=ep(visibility="org"), headers=alice.h).status_code == 201
    eng = create_engine(app_url(settings))
    with eng.connect() as c:
        for table in ("episodes", "users", "api_keys", "audit_log", "orgs", "memories"):
            assert c.execute(text(f"SELECT count(*) FROM {table}")).scalar() == 0, table
        # And another org's setting does not open this org's rows.
        c.execute(text("SELECT set_config('memscale.org_id', gen_random_uuid()::text, false)"))
        assert c.execute(text("SELECT count(*) FROM episodes")).scalar() == 0
    eng.dispose()


@pytest.mark.parametrize("stmt", ["UPDATE audit_log SET action = 'x'", "DELETE FROM audit_log", "TRUNCATE audit_log"])
def test_audit_log_is_append_only_even_for_the_owner(admin_engine, client, world, stmt):
    org = world.org()
    world.user(org)
    with admin_engine.connect() as c:
        with pytest.raises(DBAPIError, match="append-only"):
            c.execute(text(stmt))
        c.rollback()


def test_rls_holds_in_parallel_workers(settings, client, world, admin_engine):
    """The policies' setting readers are PARALLEL SAFE (migration 0020), so a large read may run on
    parallel workers. A worker must see the caller's `memscale.*` settings as the leader does: a
    read forced onto workers (debug_parallel_query) returns exactly the caller's rows, through the
    policies alone and through the search statements. Fails if a worker read the settings unset
    (the policies would hide every row) or another caller's."""
    from sqlalchemy.orm import Session

    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal
    from app.search import repository as repo
    from app.search.schemas import SearchFilters
    from tests.helpers import ep

    with admin_engine.connect() as c:  # every function any policy calls, not a list kept by hand
        called = set(
            c.execute(
                text(
                    "SELECT DISTINCT m[1] FROM pg_policy, regexp_matches(coalesce(pg_get_expr(polqual, polrelid), '') || ' ' "
                    "|| coalesce(pg_get_expr(polwithcheck, polrelid), ''), '(memscale_\\w+)\\(', 'g') AS m"
                )
            ).scalars()
        )
        labels = dict(
            c.execute(text("SELECT proname, proparallel FROM pg_proc WHERE proname = ANY(:n)"), {"n": sorted(called)}).all()
        )
    assert len(called) >= 7 and labels == {f: "s" for f in called}
    org, other = world.org(), world.org()
    alice, bob, carol = world.user(org), world.user(org), world.user(other)
    mine = {
        client.post("/v1/episodes", json=ep(content=f"alice's pottery class note {i}"), headers=alice.h).json()["id"]
        for i in range(3)
    }
    shared = client.post(
        "/v1/episodes", json=ep(content="the org's pottery kiln schedule", visibility="org"), headers=bob.h
    ).json()["id"]
    client.post("/v1/episodes", json=ep(content="bob's private pottery glaze recipe"), headers=bob.h)
    client.post("/v1/episodes", json=ep(content="carol's pottery note", visibility="org"), headers=carol.h)
    p = Principal(org_id=alice.org_id, user_id=alice.user_id, name=alice.name, roles=(), groups=(), clearances=())
    eng = create_engine(app_url(settings))
    got = {}
    try:
        for forced in (False, True):
            with Session(eng) as db:
                bind_principal(db, p)
                if forced:  # PostgreSQL 15 names the setting force_parallel_mode
                    v16 = db.execute(text("SELECT current_setting('server_version_num')::int >= 160000")).scalar()
                    db.execute(text(f"SET LOCAL {'debug_parallel_query' if v16 else 'force_parallel_mode'} = on"))
                    plan = db.execute(text("EXPLAIN SELECT id FROM episodes")).scalars().all()
                    assert any("Gather" in line for line in plan), plan  # the read really ran on a worker
                rows = {str(i) for i in db.execute(text("SELECT id FROM episodes")).scalars()}
                hits = {i for i, _ in repo.text_ids(db, p, "episode", "pottery", SearchFilters(), 50)}
                got[forced] = (rows, hits)
    finally:
        eng.dispose()
    assert got[True] == got[False] == (mine | {shared}, mine | {shared})
