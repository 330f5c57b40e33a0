"""Where the database is: the embedded pgserver (default) or MEMSCALE_DATABASE_URL.

pgserver stops the server when the last process using it exits normally; a SIGKILL leaves it
running (NOTES.md). `install_sigterm_handler` turns SIGTERM into a normal exit, and
`stop_embedded` (make stop / the tests) stops a stray server with pg_ctl.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path

from sqlalchemy.engine import make_url

from app.config import Settings

log = logging.getLogger("memscale.pg")
APP_ROLE = "memscale_app"
_servers: dict[str, object] = {}


def _sqlalchemy_url(url: str) -> str:
    u = make_url(url)
    if u.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        u = u.set(drivername="postgresql+psycopg")
    return u.render_as_string(hide_password=False)


def admin_url(settings: Settings) -> str:
    """URL of the owner role (migrations, admin CLI); starts the embedded server if needed."""
    if settings.database_url:
        return _sqlalchemy_url(settings.database_url)
    pg_dir = settings.pg_dir
    key = str(pg_dir)
    if key not in _servers:
        import pgserver

        pg_dir.mkdir(parents=True, exist_ok=True)
        srv = pgserver.get_server(pg_dir, cleanup_mode="stop")
        _servers[key] = srv
        _tune(srv)
    return f"postgresql+psycopg://postgres@/postgres?host={pg_dir}"


def _tune(srv) -> None:
    # Faster HNSW builds and sorts (NOTES.md); ALTER SYSTEM settings survive restarts.
    try:
        srv.psql("ALTER SYSTEM SET maintenance_work_mem = '512MB';")
        srv.psql("ALTER SYSTEM SET work_mem = '16MB';")
        srv.psql("SELECT pg_reload_conf();")
    except Exception as exc:  # tuning is best-effort
        log.warning("could not tune embedded postgres: %s", exc)


def app_url(settings: Settings) -> str:
    """URL the service connects with: a role that is neither superuser nor BYPASSRLS."""
    if settings.app_database_url:
        return _sqlalchemy_url(settings.app_database_url)
    u = make_url(admin_url(settings)).set(username=APP_ROLE, password=settings.app_db_password)
    return u.render_as_string(hide_password=False)


def stop_embedded(settings: Settings) -> bool:
    pg_dir = settings.pg_dir
    if not (pg_dir / "postmaster.pid").exists():
        return False
    import pgserver

    pg_ctl = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_ctl"
    cmd = [str(pg_ctl), "stop", "-D", str(pg_dir), "-m", "fast"]
    import os

    if os.geteuid() == 0:
        cmd = ["su", "pgserver", "-s", "/bin/sh", "-c", " ".join(cmd)]
    subprocess.run(cmd, check=False, capture_output=True)
    return True


def install_sigterm_handler() -> None:
    def _exit(signum, frame):  # noqa: ARG001
        sys.exit(0)

    signal.signal(signal.SIGTERM, _exit)
