"""Which databases a bootstrap job may connect to: left open, `schema_url` let an org admin make
the server connect to its own embedded Postgres as superuser, probe ports and create files.

The operator lists the database sources API users may name, in `MEMSCALE_BOOTSTRAP_SOURCES`
(JSON: `{"warehouse": "postgresql://reader@db.internal/warehouse"}`); none by default. A job
created through the API names a source by its key, or by an allow-listed URL verbatim; anything
else, and any file/SQLite or local-socket URL whatever the list says, is refused with the same
words ("source refused"), so refusals tell an attacker nothing about the network. Jobs the
operator runs from the CLI (no acting user) may use any URL.
"""

from __future__ import annotations

from app.kit.errors import Forbidden

REFUSED = "source refused"


class SourceRefused(Forbidden):
    code = "source_refused"


def _local(url: str) -> bool:
    from sqlalchemy.engine import make_url

    try:
        u = make_url(url)
    except Exception:
        return True
    host = u.host or ""
    q = {k: str(v) for k, v in u.query.items()}
    return (
        u.drivername.split("+")[0] in ("sqlite", "file")
        or not host
        or host.startswith("/")
        or "unix_socket" in q
        or q.get("host", "").startswith("/")
        or "@/" in url
    )


def resolve(schema_url: str, allowed: dict[str, str], *, operator: bool) -> str:
    """The URL to connect to for `schema_url` (a source name or URL), or SourceRefused."""
    if operator:
        return allowed.get(schema_url, schema_url)
    url = allowed.get(schema_url) or (schema_url if schema_url in allowed.values() else None)
    if url is None or _local(url):
        raise SourceRefused(REFUSED)
    return url
