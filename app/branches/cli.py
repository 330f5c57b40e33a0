"""`memscale branch create|list|diff|promote|drop --org ORG`: branches from the command line, acting
as a user of the org (`--user`, default the org's first admin or steward), under the same rules
as the API. Each command prints one JSON line."""

from __future__ import annotations

import json
import uuid
from contextlib import contextmanager

import click

from app.kit.cli import admin_session, app_sessions, fail, run_or_fail


@contextmanager
def _as_user(org_name: str, user: str | None, act: str):
    """A transaction of the service role bound to the acting user (committed on success), once
    the casbin policy allows that user to `act` on branches (as the API's `require`)."""
    from app.auth.enforcer import Authorizer
    from app.auth.principal import Principal
    from app.config import Settings
    from app.kit.database.db import bind_principal, transaction
    from app.orgs import service as orgs

    settings = Settings()
    with admin_session(settings) as adb:  # names to ids (the service role sees no org before one is bound)
        org = run_or_fail(lambda: orgs.org_by_name(adb, org_name))
        u = run_or_fail(
            lambda: (
                orgs.user_by_name(adb, org, user)
                if user
                else orgs.user_by_name(adb, org, orgs.user_name(adb, org.id, orgs.job_owner(adb, org.id, None)))
            )
        )
        p = Principal(
            org_id=org.id, user_id=u.id, name=u.name, roles=tuple(u.roles), groups=tuple(u.groups), clearances=tuple(u.clearances)
        )
    if not Authorizer().allowed(p, "branch", act):
        fail(f"{u.name}'s roles may not {act} branches")
    with transaction(app_sessions(settings)) as db:
        bind_principal(db, p)
        yield db, p


def _echo(obj) -> None:
    click.echo(json.dumps(obj, default=str))


def _acting(command):
    """The options every branch command takes: the org, and who acts in it."""
    command = click.option("--user", default=None, help="act as this user (default: the org's first admin or steward)")(command)
    return click.option("--org", "org_name", required=True)(command)


@click.group("branch")
def branch() -> None:
    """Copy-on-write branches of an org's memory."""


@branch.command("create")
@click.argument("name")
@_acting
@click.option("--from", "from_", default="main", show_default=True)
@click.option("--at", default=None, help="fork the base as it stood then (ISO timestamp)")
def create(name: str, org_name: str, from_: str, at: str | None, user: str | None) -> None:
    from app.branches import service
    from app.branches.schemas import BranchIn

    body = BranchIn.model_validate({"name": name, "from": from_, "at": at})
    with _as_user(org_name, user, "write") as (db, p):
        _echo(run_or_fail(lambda: service.create(db, p, body)).model_dump(mode="json", by_alias=True))


@branch.command("list")
@_acting
def list_(org_name: str, user: str | None) -> None:
    from app.branches import service

    with _as_user(org_name, user, "read") as (db, p):
        _echo([b.model_dump(mode="json", by_alias=True) for b in service.list_all(db, p)])


@branch.command("diff")
@click.argument("name")
@_acting
def diff(name: str, org_name: str, user: str | None) -> None:
    from app.branches import service

    with _as_user(org_name, user, "read") as (db, p):
        _echo([c.model_dump(mode="json") for c in run_or_fail(lambda: service.diff(db, p, name))])


@branch.command("promote")
@click.argument("name")
@click.argument("ids", nargs=-1, required=True)
@_acting
def promote(name: str, ids, org_name: str, user: str | None) -> None:
    from app.branches import service

    with _as_user(org_name, user, "write") as (db, p):
        done = run_or_fail(lambda: service.promote(db, p, name, [uuid.UUID(i) for i in ids]))
        _echo([x.model_dump(mode="json") for x in done])


@branch.command("drop")
@click.argument("name")
@_acting
def drop(name: str, org_name: str, user: str | None) -> None:
    from app.branches import service

    with _as_user(org_name, user, "write") as (db, p):
        run_or_fail(lambda: service.drop(db, p, name))
    click.echo(f"dropped {name}")
