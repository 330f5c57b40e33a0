"""The embedded server's memory follows the machine: shared_buffers a quarter of its memory within
[256 MB, 8 GB], effective_cache_size half, MEMSCALE_PG_SHARED_BUFFERS overriding, applied at every
start, so a data folder made with the old fixed 256MB gets the new size at its next start."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import create_engine, text

from app.kit.database.embedded_pg import MB, machine_memory, memory_settings, size_bytes

GB = 1024 * MB


def _external() -> bool:
    return bool(os.environ.get("MEMSCALE_TEST_DATABASE_URL") or os.environ.get("MEMSCALE_DATABASE_URL"))


def _memory(url: str) -> dict[str, tuple[int, str]]:
    eng = create_engine(url)
    try:
        with eng.connect() as c:
            rows = c.execute(
                text(
                    "SELECT name, pg_size_bytes(current_setting(name)), source FROM pg_settings"
                    " WHERE name IN ('shared_buffers', 'effective_cache_size')"
                )
            ).all()
    finally:
        eng.dispose()
    return {name: (int(b), source) for name, b, source in rows}


def test_the_default_is_a_quarter_of_the_machine_within_bounds():
    assert memory_settings(total=24 * GB) == {"shared_buffers": "6144MB", "effective_cache_size": "12288MB"}
    assert memory_settings(total=512 * MB)["shared_buffers"] == "256MB"  # never below the old fixed size
    assert memory_settings(total=512 * MB)["effective_cache_size"] == "256MB"  # never below the pool
    assert memory_settings(total=256 * GB)["shared_buffers"] == "8192MB"  # capped
    assert memory_settings("3GB", total=24 * GB) == {"shared_buffers": "3GB", "effective_cache_size": "12288MB"}
    meminfo = int(next(line for line in open("/proc/meminfo") if line.startswith("MemTotal:")).split()[1]) * 1024
    assert 0 < machine_memory() <= meminfo


def test_a_size_that_is_not_one_is_refused_before_the_server_starts():
    from pydantic import ValidationError

    from app.config import Settings

    assert size_bytes("512MB") == 512 * MB and size_bytes("2GB") == 2 * GB and size_bytes("1024") == 8 * MB
    for bad in ("lots", "2 GB", "1GB -c fsync=off", "-1MB", ""):
        with pytest.raises(ValueError):
            memory_settings(bad or " ")
        with pytest.raises(ValidationError, match="PostgreSQL memory size"):
            Settings(pg_shared_buffers=bad or " ")
    assert Settings(pg_shared_buffers="1GB").pg_shared_buffers == "1GB"


def test_the_running_server_reports_the_computed_size(admin_engine, settings):
    if _external():
        pytest.skip("an external server is sized by its operator")
    from app.kit.database.pg import embedded

    srv = embedded(settings)
    assert srv.memory == memory_settings(settings.pg_shared_buffers)
    got = _memory(str(admin_engine.url.render_as_string(hide_password=False)))
    assert got["shared_buffers"] == (size_bytes(srv.memory["shared_buffers"]), "command line")
    assert got["effective_cache_size"] == (size_bytes(srv.memory["effective_cache_size"]), "command line")


def test_an_old_data_folder_gets_the_size_at_its_next_start_and_the_override_wins(settings, monkeypatch):
    """A folder whose postgresql.conf holds the old fixed 256MB (as initdb wrote it before) starts
    with the machine's size; the setting overrides it at the next start; nothing is rewritten in
    the folder, so removing the setting goes back to the machine's size."""
    import subprocess
    import tempfile
    from pathlib import Path

    if _external():
        pytest.skip("an external server")
    from app.kit.database.embedded_pg import EmbeddedPostgres
    from app.kit.database.pg import embedded

    root = Path(tempfile.mkdtemp(prefix="mspgm", dir="/tmp"))  # short: the socket lives in the data folder
    install = settings.data_dir.resolve() / "pginstall"
    try:
        old = EmbeddedPostgres(root / "pg", install)
        old.init()
        conf = root / "pg" / "postgresql.conf"
        conf.write_text(conf.read_text() + "\nshared_buffers = 256MB\neffective_cache_size = 4GB\n")
        default = memory_settings()
        old.start()
        got = _memory(old.url)
        assert got["shared_buffers"] == (size_bytes(default["shared_buffers"]), "command line")
        assert got["effective_cache_size"][0] == size_bytes(default["effective_cache_size"])
        old.stop()

        monkeypatch.setenv("MEMSCALE_PG_SHARED_BUFFERS", "160MB")
        from app.config import Settings

        s = Settings().model_copy(update={"data_dir": root})
        srv = EmbeddedPostgres(root / "pg", install, shared_buffers=s.pg_shared_buffers)
        assert embedded(s.model_copy(update={"data_dir": settings.data_dir})).memory["shared_buffers"] == "160MB"
        srv.start()
        assert _memory(srv.url)["shared_buffers"] == (160 * MB, "command line")
        srv.stop()
        assert "160MB" not in conf.read_text() and "160MB" not in (root / "pg" / "postgresql.auto.conf").read_text()
    finally:
        EmbeddedPostgres(root / "pg", install).stop("immediate")
        subprocess.run(["rm", "-rf", str(root)], check=False)
