"""Statements over branches, and over what a branch wrote (its rows and masks)."""

from __future__ import annotations

import uuid

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.branches.models import Branch
from app.kit.tenancy.access import visible_to
from app.kit.tenancy.view_models import BranchMask
from app.memories.models import Memory


def by_name(db: Session, org_id: uuid.UUID, name: str) -> Branch | None:
    return db.execute(select(Branch).where(Branch.org_id == org_id, Branch.name == name)).scalar_one_or_none()


def by_id(db: Session, org_id: uuid.UUID, branch_id: uuid.UUID) -> Branch | None:
    return db.execute(select(Branch).where(Branch.org_id == org_id, Branch.id == branch_id)).scalar_one_or_none()


def all_of(db: Session, org_id: uuid.UUID) -> list[Branch]:
    return list(db.execute(select(Branch).where(Branch.org_id == org_id).order_by(Branch.created_at)).scalars())


def add(db: Session, b: Branch) -> None:
    db.add(b)
    db.flush()


def children(db: Session, org_id: uuid.UUID, branch_id: uuid.UUID) -> int:
    return db.execute(
        select(func.count()).select_from(Branch).where(Branch.org_id == org_id, Branch.parent_id == branch_id)
    ).scalar_one()


def drop(db: Session, org_id: uuid.UUID, branch_id: uuid.UUID) -> None:
    """The branch row; its rows, masks and jobs go with it (foreign keys ON DELETE CASCADE)."""
    db.execute(delete(Branch).where(Branch.org_id == org_id, Branch.id == branch_id))


def written(db: Session, principal: Principal, branch_id: uuid.UUID, model, ids=None) -> list:
    """Rows of `model` written in the branch that the principal (reading in the branch) may see."""
    stmt = select(model).where(model.branch_id == branch_id, visible_to(principal, model))
    if ids is not None:
        stmt = stmt.where(model.id.in_(list(ids)))
    order = model.recorded_at if model is Memory else model.created_at
    return list(db.execute(stmt.order_by(order, model.id)).scalars())


def masks(db: Session, org_id: uuid.UUID, branch_id: uuid.UUID, keys=None) -> list[BranchMask]:
    stmt = select(BranchMask).where(BranchMask.org_id == org_id, BranchMask.branch_id == branch_id)
    if keys is not None:
        stmt = stmt.where(BranchMask.key.in_(list(keys)))
    return list(db.execute(stmt.order_by(BranchMask.at)).scalars())


def visible_keys(db: Session, principal: Principal, model, keys) -> set:
    """Which of these keys (memory roots, episode ids) name rows the principal may see in its view
    (the base a branch masked), in one statement."""
    key = model.root_id if model is Memory else model.id
    return set(
        db.execute(
            select(key).where(model.org_id == principal.org_id, key.in_(list(keys)), visible_to(principal, model))
        ).scalars()
    )
