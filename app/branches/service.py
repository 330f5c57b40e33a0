"""Branches of an org's memory: create in O(1), read and write in one with the
`Memscale-Branch` header, diff, promote chosen changes to main, drop. How a branch reads is
app/kit/tenancy/view.py; this module turns a branch into a view and does the branch-level operations.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.branches import repository as repo
from app.branches.models import Branch
from app.branches.schemas import BranchIn, BranchOut, Change, Promoted
from app.embedders.service import hold as hold_embedder
from app.episodes import service as episodes
from app.episodes.models import Episode
from app.kit.database.db import bind_principal
from app.kit.errors import AppError, Conflict, NotFound
from app.kit.items import ASSET, BRANCH_TYPES, EPISODE, MEMORY
from app.kit.registry import model_of
from app.kit.tenancy.view import MAIN, Layer, View
from app.knowledge.models import KnowledgeAsset
from app.memories import promotion
from app.memories.models import Memory

MAIN_NAME = "main"


def view_for(db: Session, org_id: uuid.UUID, branch: Branch | None) -> View:
    """A branch as a stack of layers: its own rows now, then each ancestor as it stood at the
    fork below it (the earliest fork on the way down cuts main)."""
    if branch is None:
        return MAIN
    layers, cutoff, parent_id = [Layer(branch.id)], branch.fork_at, branch.parent_id
    while parent_id is not None:
        parent = repo.by_id(db, org_id, parent_id)
        layers.append(Layer(parent.id, cutoff))
        cutoff, parent_id = min(cutoff, parent.fork_at), parent.parent_id
    layers.append(Layer(None, cutoff))
    return View(layers=tuple(layers), branch=branch.name)


def _get(db: Session, org_id: uuid.UUID, name: str) -> Branch:
    b = repo.by_name(db, org_id, name)
    if b is None:
        raise NotFound(f"branch {name!r} not found", code="branch_not_found")
    return b


def view_named(db: Session, org_id: uuid.UUID, name: str | None) -> View:
    """The view a `Memscale-Branch: <name>` header asks for (404 for an unknown branch)."""
    if not name or name == MAIN_NAME:
        return MAIN
    return view_for(db, org_id, _get(db, org_id, name))


def view_by_id(db: Session, org_id: uuid.UUID, branch_id: uuid.UUID | None) -> View:
    """The view of a job's branch (a dropped branch takes its jobs with it)."""
    return view_for(db, org_id, repo.by_id(db, org_id, branch_id) if branch_id is not None else None)


def _out(db: Session, b: Branch) -> BranchOut:
    parent = repo.by_id(db, b.org_id, b.parent_id) if b.parent_id else None
    return BranchOut(
        id=b.id,
        name=b.name,
        from_=parent.name if parent else MAIN_NAME,
        fork_at=b.fork_at,
        created_at=b.created_at,
        created_by=b.created_by,
    )


def create(db: Session, principal: Principal, body: BranchIn) -> BranchOut:
    """One row: no memory is copied, whatever the org's size."""
    if body.name == MAIN_NAME:
        raise Conflict("'main' is the org's memory itself", code="branch_exists")
    if repo.by_name(db, principal.org_id, body.name) is not None:
        raise Conflict(f"branch {body.name!r} exists", code="branch_exists")
    parent = None if body.from_ == MAIN_NAME else _get(db, principal.org_id, body.from_)
    now = datetime.now(UTC)
    if body.at is not None and body.at > now:
        raise AppError("a branch cannot fork from the future", code="validation_error", status_code=422)
    b = Branch(
        id=uuid.uuid4(),
        org_id=principal.org_id,
        name=body.name,
        parent_id=parent.id if parent else None,
        fork_at=body.at or now,
        created_by=principal.user_id,
        created_at=now,
    )
    repo.add(db, b)
    record(
        db,
        org_id=principal.org_id,
        actor_id=principal.user_id,
        action="branch.create",
        target_type="branch",
        target_id=b.id,
        details={"name": b.name, "from": body.from_, "fork_at": b.fork_at.isoformat()},
    )
    return _out(db, b)


def list_all(db: Session, principal: Principal) -> list[BranchOut]:
    return [_out(db, b) for b in repo.all_of(db, principal.org_id)]


def _in_branch(db: Session, principal: Principal, b: Branch) -> Principal:
    """The principal reading in `b`, with the transaction bound to it (row-level security lets it
    see the branch's rows); call `bind_principal(db, principal)` to come back."""
    bp = principal.in_view(view_for(db, principal.org_id, b))
    bind_principal(db, bp)
    return bp


def _changes(db: Session, principal: Principal, b: Branch, ids=None) -> list[tuple[Change, object]]:
    """What the branch changed that the principal may see: (change, the branch row or None)."""
    bp = _in_branch(db, principal, b)  # nothing in here writes; on an error the request rolls back
    out: list[tuple[Change, object]] = []
    for m in repo.written(db, bp, b.id, Memory, ids):
        out.append(
            (
                Change(
                    change="created" if m.version == 1 else "new_version",
                    type=MEMORY,
                    id=m.id,
                    root_id=m.root_id,
                    version=m.version,
                    status=m.status,
                    kind=m.kind,
                    text=m.text,
                    at=m.recorded_at,
                ),
                m,
            )
        )
    for e in repo.written(db, bp, b.id, Episode, ids):
        out.append((Change(change="created", type=EPISODE, id=e.id, kind=e.kind, text=e.content, at=e.created_at), e))
    for a in repo.written(db, bp, b.id, KnowledgeAsset, ids):  # a bootstrap run in the branch
        out.append(
            (Change(change="created", type=ASSET, id=a.id, kind=a.kind, text=a.source_uri, status=a.status, at=a.created_at), a)
        )
    rewritten = {m.root_id for c, m in out if c.type == MEMORY}  # a new version: listed above
    masks = [m for m in repo.masks(db, b.org_id, b.id, ids) if m.key not in rewritten]
    base = principal.in_view(bp.view.below())  # the state the branch forked from
    for type_ in BRANCH_TYPES:
        model = model_of(type_)
        table = model.__tablename__
        keys = [m.key for m in masks if m.item_type == table]
        seen = repo.visible_keys(db, base, model, keys) if keys else set()
        out += [
            (Change(change="deleted", type=type_, id=m.key, at=m.at), None)  # deleted what the caller may see
            for m in masks
            if m.item_type == table and m.key in seen
        ]
    bind_principal(db, principal)  # back to the caller's own view
    return sorted(out, key=lambda x: x[0].at)


def diff(db: Session, principal: Principal, name: str) -> list[Change]:
    return [c for c, _ in _changes(db, principal, _get(db, principal.org_id, name))]


def promote(db: Session, principal: Principal, name: str, ids: list[uuid.UUID]) -> list[Promoted]:
    """Apply chosen branch changes to main, each as a new version (or a new item, or a deletion)
    with `promoted_from` lineage to the branch item; audited. All or nothing: an id that is not a
    change of this branch the caller may see is a 404 and nothing is applied."""
    if principal.view.branch_id is not None:
        raise AppError(
            "promote applies a branch to main: send it without Memscale-Branch", code="validation_error", status_code=422
        )
    hold_embedder(db, principal.org_id)  # copied vectors stay the org's model's to the commit
    b = _get(db, principal.org_id, name)
    wanted = list(dict.fromkeys(ids))
    changes = _changes(db, principal, b, wanted)
    found = {c.id for c, _ in changes}
    if missing := [i for i in wanted if i not in found]:
        raise NotFound(f"no change {missing[0]} in branch {name!r}", code="change_not_found")
    if assets := [c.id for c, _ in changes if c.type == ASSET]:
        raise AppError(
            f"asset {assets[0]}: knowledge comes from its sources; run the bootstrap in main to take it "
            "over (promote applies memories and episodes)",
            code="not_promotable",
            status_code=422,
        )
    now, out = datetime.now(UTC), []
    for c, row in changes:
        if c.type == MEMORY and c.change != "deleted":
            if row.status != "active":
                raise Conflict(
                    f"memory {row.id} is {row.status} in the branch; promote its current version", code="not_current_version"
                )
            main_id = promotion.promote_version(db, principal, row, branch=name, now=now).id
        elif c.type == EPISODE and c.change == "created":
            main_id = episodes.promote(db, principal, row, branch=name).id
        elif c.type == MEMORY:
            promotion.delete_root_of(db, principal, c.id)
            main_id = None
        else:
            episodes.delete(db, principal, c.id)
            main_id = None
        out.append(Promoted(id=c.id, type=c.type, change=c.change, main_id=main_id))
    record(
        db,
        org_id=principal.org_id,
        actor_id=principal.user_id,
        action="branch.promote",
        target_type="branch",
        target_id=b.id,
        details={"name": name, "promoted": [p.model_dump(mode="json") for p in out]},
    )
    return out


def drop(db: Session, principal: Principal, name: str) -> None:
    """The branch and everything written in it (rows, masks, jobs); main is untouched."""
    b = _get(db, principal.org_id, name)
    if repo.children(db, principal.org_id, b.id):
        raise Conflict(f"branch {name!r} has branches of its own; drop them first", code="branch_has_children")
    repo.drop(db, principal.org_id, b.id)
    record(
        db,
        org_id=principal.org_id,
        actor_id=principal.user_id,
        action="branch.drop",
        target_type="branch",
        target_id=b.id,
        details={"name": name},
    )
