"""The embedded server: PostgreSQL 18 + pgvector 0.8, off the network, never as root, and the
supported-range check that guards an external MEMSCALE_DATABASE_URL."""

from __future__ import annotations

import os
import pwd

import pytest
from sqlalchemy import text


def test_engine_versions_and_iterative_scans(admin_engine):
    from app.kit.database.pg import check_versions

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
    from app.kit.database import pg

    monkeypatch.setattr(pg, "MIN_VECTOR", (9, 0))
    with admin_engine.connect() as c, pytest.raises(RuntimeError, match="pgvector >= 9.0"):
        pg.check_versions(c)
    monkeypatch.setattr(pg, "MIN_SERVER", 990000)
    with admin_engine.connect() as c, pytest.raises(RuntimeError, match="PostgreSQL >= 99"):
        pg.check_versions(c)


ATTACH = """
import sys, time
from pathlib import Path
from sqlalchemy import create_engine, text
from app.kit.database.embedded_pg import EmbeddedPostgres
srv = EmbeddedPostgres(Path(sys.argv[1]), Path(sys.argv[2]))
while time.time() < float(sys.argv[3]):  # both processes attach at the same instant
    time.sleep(0.005)
srv.attach()
eng = create_engine(srv.url)
with eng.connect() as c:
    print(c.execute(text("SELECT 1")).scalar())
eng.dispose()
"""


def test_processes_attaching_at_once_share_one_server_and_the_last_stops_it(settings, tmp_path):
    """Two processes attach to a fresh data folder at the same moment (as `make test`'s two
    workers do): one initialises and starts the server, the other waits its turn and finds it
    running; both are answered, and the server stops when the last of them exits."""
    import subprocess
    import sys
    import tempfile
    import time
    from pathlib import Path

    if os.environ.get("MEMSCALE_TEST_DATABASE_URL") or os.environ.get("MEMSCALE_DATABASE_URL"):
        pytest.skip("an external server")
    root = Path(tempfile.mkdtemp(prefix="mspga", dir="/tmp"))  # short: the socket lives in the data folder
    try:
        pg_dir, install = root / "pg", settings.data_dir.resolve() / "pginstall"
        at = str(time.time() + 3)
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", ATTACH, str(pg_dir), str(install), at],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [err[-1500:] for _, err in outs]
        assert [out.strip() for out, _ in outs] == ["1", "1"]
        assert (pg_dir / "PG_VERSION").exists() and not (pg_dir / "postmaster.pid").exists()
    finally:
        from app.kit.database.embedded_pg import EmbeddedPostgres

        EmbeddedPostgres(root / "pg", settings.data_dir.resolve() / "pginstall").stop("immediate")
        subprocess.run(["rm", "-rf", str(root)], check=False)
