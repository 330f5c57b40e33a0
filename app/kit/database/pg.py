"""Where the database is: the embedded PostgreSQL 18 + pgvector 0.8 (default; app/kit/database/embedded_pg.py)
or MEMSCALE_DATABASE_URL (PostgreSQL >= 15 with pgvector >= 0.8, checked at start-up).

The embedded server stops when the last process using it exits normally; a SIGKILLed process
is ignored when the others count who is left. `install_sigterm_handler` turns SIGTERM into a
normal exit, and `stop_embedded` (make stop / the tests) stops the server outright.
"""

from __future__ import annotations

import logging
import signal
import sys

from sqlalchemy.engine import make_url

from app.config import Settings
from app.kit.database.embedded_pg import EmbeddedPostgres

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
    srv = embedded(settings)
    key = str(srv.pg_dir)
    if key not in _servers:
        srv.attach()
        _servers[key] = srv
    return srv.url


def embedded(settings: Settings) -> EmbeddedPostgres:
    return EmbeddedPostgres(settings.pg_dir, settings.data_dir.resolve() / "pginstall", shared_buffers=settings.pg_shared_buffers)


def app_url(settings: Settings) -> str:
    """URL the service connects with: a role that is neither superuser nor BYPASSRLS."""
    if settings.app_database_url:
        return _sqlalchemy_url(settings.app_database_url)
    u = make_url(admin_url(settings)).set(username=APP_ROLE, password=settings.app_db_password)
    return u.render_as_string(hide_password=False)


def stop_embedded(settings: Settings) -> bool:
    if settings.database_url:
        return False
    return embedded(settings).stop()


MIN_SERVER = 150000  # PostgreSQL 15
MIN_VECTOR = (0, 8)


def check_versions(conn) -> tuple[str, str]:
    """Refuse a server outside the supported range with a message that says what to do."""
    from app.kit.database.repository import server_versions

    num, ver, vec = server_versions(conn)
    if num < MIN_SERVER:
        raise RuntimeError(f"memscale needs PostgreSQL >= {MIN_SERVER // 10000}; the server is {ver}")
    if vec is None or tuple(int(x) for x in vec.split(".")[:2]) < MIN_VECTOR:
        raise RuntimeError(
            f"memscale needs pgvector >= {MIN_VECTOR[0]}.{MIN_VECTOR[1]} (iterative index scans); the server has "
            f"{vec or 'no pgvector'}: install or upgrade it (CREATE EXTENSION / ALTER EXTENSION vector UPDATE)"
        )
    return ver, vec


def install_sigterm_handler() -> None:
    def _exit(signum, frame):
        sys.exit(0)

    signal.signal(signal.SIGTERM, _exit)
