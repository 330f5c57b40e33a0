"""The few statements the plumbing runs itself: is the server there, and which versions it has."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection


def ping(conn: Connection) -> None:
    conn.execute(text("SELECT 1"))


def server_versions(conn: Connection) -> tuple[int, str, str | None]:
    """(server_version_num, server_version, pgvector version installed or else available)."""
    num = int(conn.execute(text("SHOW server_version_num")).scalar())
    ver = conn.execute(text("SHOW server_version")).scalar()
    vec = (
        conn.execute(text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar()
        or conn.execute(text("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")).scalar()
    )
    return num, ver, vec
