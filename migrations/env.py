"""Alembic environment: the owner URL comes from Settings (the embedded PostgreSQL 18 by default).
A server outside the supported range (PostgreSQL >= 15, pgvector >= 0.8) is refused before any change."""

from alembic import context
from sqlalchemy import create_engine, pool

from app.config import Settings
from app.kit.database.migrate import include_object as _include_object
from app.kit.database.pg import admin_url
from app.kit.registry import metadata

config = context.config


def run_migrations_online() -> None:
    url = config.attributes.get("url") or admin_url(Settings())
    connectable = config.attributes.get("connection") or create_engine(url, poolclass=pool.NullPool)
    if hasattr(connectable, "connect"):
        with connectable.connect() as connection:
            _run(connection)
    else:
        _run(connectable)


def _run(connection) -> None:
    from app.kit.database.pg import check_versions

    check_versions(connection)
    connection.commit()  # end the check's implicit transaction, so the migration's own one commits
    context.configure(connection=connection, target_metadata=metadata, include_object=_include_object, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()
