"""What every `memscale` command group shares: the two ways to open the database from the command
line, and one way to fail (the REST contract: an error is one line on stderr and exit status 2)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import click

from app.config import Settings

if TYPE_CHECKING:  # the command line starts without SQLAlchemy; a command that opens the database loads it
    from sqlalchemy.orm import Session, sessionmaker

T = TypeVar("T")


def admin_session(settings: Settings) -> Session:
    """A session of the owner role (operator actions: creating orgs, users and keys)."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from app.kit.database.pg import admin_url

    return Session(create_engine(admin_url(settings)), info={"audit_key": settings.audit_secret()})


def app_sessions(settings: Settings) -> sessionmaker[Session]:
    """Sessions of the service role, under row-level security like the API's."""
    from app.kit.database.db import make_engine, make_sessionmaker
    from app.kit.database.pg import app_url

    return make_sessionmaker(make_engine(app_url(settings), pool_size=2), audit_key=settings.audit_secret())


def fail(msg: str) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


def run_or_fail(fn: Callable[[], T]) -> T:
    """`fn()`, or its AppError's message as the command's one error line."""
    from app.kit.errors import AppError

    try:
        return fn()
    except AppError as exc:
        fail(exc.message)
