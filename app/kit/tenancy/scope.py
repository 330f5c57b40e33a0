"""Access survives derivation (DESIGN.md §4): a derived item's scope is the most restrictive
combination of its sources. Used by manual memories with sources, distillation and consolidation.
Narrowing reaches a memory's history (`meet`): every version keeps the narrowest scope
its memory has been given since."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from app.kit.errors import AppError


class IncompatibleScopes(AppError):
    status_code, code = 422, "incompatible_scopes"


@dataclass(frozen=True)
class Scope:
    visibility: str
    owner_id: uuid.UUID | None = None  # set when private
    groups: tuple[str, ...] = ()
    labels: tuple[str, ...] = field(default=())


def derive(sources: list[Scope]) -> Scope | None:
    """Most restrictive scope of `sources`; None when there are no sources; raises when they
    cannot share one item (private to different owners, or group sets with no common group)."""
    if not sources:
        return None
    labels = tuple(sorted({lab for s in sources for lab in s.labels}))
    private_owners = {s.owner_id for s in sources if s.visibility == "private"}
    if len(private_owners) > 1:
        raise IncompatibleScopes("sources are private to different owners; they cannot form one item")
    if private_owners:
        return Scope("private", owner_id=next(iter(private_owners)), labels=labels)
    group_sets = [set(s.groups) for s in sources if s.visibility == "group"]
    if group_sets:
        common = set.intersection(*group_sets)
        if not common:
            raise IncompatibleScopes("sources are shared with disjoint groups; they cannot form one item")
        return Scope("group", groups=tuple(sorted(common)), labels=labels)
    return Scope("org", labels=labels)


def no_wider(requested: Scope, bound: Scope) -> bool:
    """True when `requested` reveals nothing that `bound` would not."""
    if not set(bound.labels) <= set(requested.labels):
        return False
    if bound.visibility == "private":
        return requested.visibility == "private" and requested.owner_id == bound.owner_id
    if bound.visibility == "group":
        if requested.visibility == "private":
            return True
        return requested.visibility == "group" and set(requested.groups) <= set(bound.groups)
    return True


def of(row) -> Scope:
    return Scope(
        row.visibility,
        owner_id=row.owner_id if row.visibility == "private" else None,
        groups=tuple(row.groups),
        labels=tuple(row.labels),
    )


def meet(row: Scope, since: Scope, *, owner_id: uuid.UUID) -> Scope:
    """The scope a version of a memory keeps once the memory has been given `since` (a later
    version's scope): never wider than either. Private wins, with the row's own owner (`owner_id`,
    who always sees their own row); groups intersect, and with none in common only the owner is
    left (private); labels union. Unlike `derive` it never refuses: a version cannot decline to
    be hidden."""
    labels = tuple(sorted(set(row.labels) | set(since.labels)))
    if "private" not in (row.visibility, since.visibility):
        try:
            return replace(derive([row, since]), labels=labels)  # org, or the common groups
        except IncompatibleScopes:  # disjoint groups: nobody but the owner is in both
            pass
    return Scope("private", owner_id=owner_id, labels=labels)
