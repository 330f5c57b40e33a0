"""The embedded server: PostgreSQL 18 + pgvector 0.8, off the network, never as root, and the
supported-range check that guards an external MEMSCALE_DATABASE_URL."""

from __future__ import annotations

import os
import pwd

import pytest
from sqlalchemy import text


def test_engine_versions_and_iterative_scans(admin_engine):
    from app.kit.pg import check_versions

    with admin_engine.connect() as c:
        ver, vec = check_versions(c)
        assert ver.startswith("18.") and tuple(int(x) for x in vec.split(".")[:2]) >= (0, 8)
        c.execute(text("SET hnsw.iterative_scan = relaxed_order"))  # pgvector 0.8's filtered kNN
        assert c.execute(text("SHOW hnsw.iterative_scan")).scalar() == "relaxed_order"


def test_off_the_network_and_not_root(admin_engine, settings):
    if os.environ.get("MEMSCALE_TEST_DATABASE_URL") or os.environ.get("MEMSCALE_DATABASE_URL"):
        pytest.skip("an external server")
    with admin_engine.connect() as c:
        assert c.execute(text("SHOW listen_addresses")).scalar() == ""
        assert c.execute(text("SELECT count(*) FROM pg_hba_file_rules WHERE type <> 'local'")).scalar() == 0
    owner = pwd.getpwuid(settings.pg_dir.stat().st_uid).pw_name
    assert owner != "root" and (settings.pg_dir.stat().st_mode & 0o077) == 0


def test_a_server_below_the_supported_range_is_refused(admin_engine, monkeypatch):
    from app.kit import pg

    monkeypatch.setattr(pg, "MIN_VECTOR", (9, 0))
    with admin_engine.connect() as c, pytest.raises(RuntimeError, match="pgvector >= 9.0"):
        pg.check_versions(c)
    monkeypatch.setattr(pg, "MIN_SERVER", 990000)
    with admin_engine.connect() as c, pytest.raises(RuntimeError, match="PostgreSQL >= 99"):
        pg.check_versions(c)
