from __future__ import annotations

from fastapi import APIRouter, Response

from app.branches import service
from app.branches.schemas import BranchDiff, BranchIn, BranchList, BranchOut, PromoteIn, PromoteOut
from app.kit.errors import COMMON_ERRORS
from app.kit.http.deps import SessionDep, require

router = APIRouter(prefix="/v1/branches", tags=["branches"], responses=COMMON_ERRORS)


@router.post("", status_code=201, response_model=BranchOut, response_model_by_alias=True)
def create_branch(body: BranchIn, db: SessionDep, principal=require("branch", "write")):
    """A copy-on-write branch of the org's memory (stewards, admins): O(1), nothing is copied."""
    return service.create(db, principal, body)


@router.get("", response_model=BranchList, response_model_by_alias=True)
def list_branches(db: SessionDep, principal=require("branch", "read")):
    return BranchList(branches=service.list_all(db, principal))


@router.get("/{name}/diff", response_model=BranchDiff)
def branch_diff(name: str, db: SessionDep, principal=require("branch", "read")):
    """What the branch changed (what the caller may see of it): items written, versions, deletions."""
    return BranchDiff(name=name, changes=service.diff(db, principal, name))


@router.post("/{name}/promote", response_model=PromoteOut)
def promote(name: str, body: PromoteIn, db: SessionDep, principal=require("branch", "write")):
    """Apply chosen changes of the branch to main as new versions, with lineage; audited."""
    return PromoteOut(name=name, promoted=service.promote(db, principal, name, body.ids))


@router.delete("/{name}", status_code=204)
def drop_branch(name: str, db: SessionDep, principal=require("branch", "write")):
    service.drop(db, principal, name)
    return Response(status_code=204)
