"""Request-scoped dependencies: the transaction, the principal, the permission check."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.branches import service as branches
from app.kit.database.db import bind_principal, released, transaction
from app.kit.errors import Forbidden, RateLimited, Unauthorized
from app.orgs.service import resolve_key

BRANCH_HEADER = "memscale-branch"


def get_db(request: Request) -> Iterator[Session]:
    """The request owns the transaction: commit after the endpoint returns, before the response.
    A transaction that wrote leaves its WAL position for the Memscale-LSN header (app/kit/database/replicas.py)."""
    lsn: list[str] = []
    with transaction(request.app.state.sessions, lsn=lsn) as db:
        yield db
    if lsn:
        request.state.memscale_lsn = lsn[0]


SessionDep = Annotated[Session, Depends(get_db, scope="function")]


def get_principal(request: Request, db: SessionDep) -> Principal:
    auth = request.headers.get("authorization", "")
    scheme, _, key = auth.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("missing Bearer key", code="missing_key")
    # Guessing keys costs: each client address has a small budget of failed attempts; once it
    # is spent, every attempt from there is a 429 (with Retry-After) until it refills.
    failures = getattr(request.app.state, "auth_failures", None)
    client = f"ip:{request.client.host if request.client else '?'}"
    if failures is not None and (wait := failures.blocked(client)):
        raise RateLimited("too many failed authentications; slow down", retry_after_s=wait)
    principal = resolve_key(db, key.strip())
    if principal is None:
        if failures is not None:
            failures.check(client)
        raise Unauthorized("invalid or revoked key", code="invalid_key")
    if branch := request.headers.get(BRANCH_HEADER):  # work in a branch of the org's memory
        principal = principal.in_view(branches.view_named(db, principal.org_id, branch.strip()))
        bind_principal(db, principal)
    request.state.principal = principal
    limiter = getattr(request.app.state, "rate_limiter", None)
    if limiter is not None:
        limiter.check(str(principal.user_id))
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def _read_turn(request: Request, db: SessionDep, principal: PrincipalDep) -> Iterator[None]:
    """One of the caller's fair share of concurrent reads (app/kit/http/read_gate.py), held until the
    endpoint returns; a read that waits for its turn gives its pooled connection back meanwhile."""
    gate = getattr(request.app.state, "read_gate", None)
    if gate is None:
        yield
        return
    with gate.slot(str(principal.user_id), while_waiting=lambda: released(db, principal)):
        yield


ReadTurn = Annotated[None, Depends(_read_turn, scope="function")]


def require(obj: str, act: str):
    """Dependency factory: the casbin enforcer must allow (role, org, obj, act). The check is
    in-memory, so it runs on the event loop (async): a sync dependency costs a thread-pool hop."""

    async def _check(request: Request, principal: PrincipalDep) -> Principal:
        if not request.app.state.authorizer.allowed(principal, obj, act):
            raise Forbidden(f"your roles may not {act} {obj}")
        return principal

    return Depends(_check)
