"""Migrations are the only way the schema changes; RLS and the audit log hold in the database."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from app.kit.pg import app_url
from app.kit.registry import metadata
from app.kit.migrate import include_object as _include_object
from tests.helpers import scratch_database


def test_models_and_migrations_agree(admin_engine):
    with admin_engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "include_object": _include_object})
        diff = compare_metadata(ctx, metadata)
    assert diff == [], diff


def test_downgrade_then_upgrade(settings, admin_engine):
    from alembic.script import ScriptDirectory

    from app.kit.migrate import alembic_config, downgrade, upgrade

    with scratch_database(settings, "memscale_migtest") as (s, eng):
        upgrade(s, "head")
        downgrade(s, "base")
        with eng.connect() as c:
            left = c.execute(text("SELECT count(*) FROM pg_tables WHERE schemaname='public' "
                                  "AND tablename <> 'alembic_version'")).scalar()
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
