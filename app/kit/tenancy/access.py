"""The one access helper. Every read path filters with `visible_to`; RLS enforces the same rule.

An item is visible to a principal of its org when the principal owns it, or when it is shared
(`org`, or `group` with a common group) and the principal's clearances cover all its labels.
"""

from __future__ import annotations

from sqlalchemy import Text, and_, any_, false, func, literal, or_
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql.elements import ColumnElement

from app.auth.principal import Principal
from app.kit.tenancy.repository_view import in_view


def _text_array(values) -> ColumnElement:
    return literal(list(values) or [""], type_=ARRAY(Text))


def in_groups(model, groups) -> ColumnElement[bool]:
    """`model.groups && groups` (a text array without NULLs), written so that row-level security
    lets an index lead: the overlap operator is not leakproof, so under RLS it can only filter rows
    already fetched (every group row of the org), while a subscript and text equality are. A row's
    first group among `groups`, or a row of several groups that overlaps them: the same truth value
    as the overlap for every row, NULLs included (three-valued: it stands under NOT too, e.g. in
    app/search/repository/bm25_stats.py). Indexes `ix_<table>_group_first` and `_group_more`."""
    g = _text_array(groups)
    first = model.groups[1]
    return or_(and_(first.is_not(None), first == any_(g)), and_(func.cardinality(model.groups) > 1, model.groups.overlap(g)))


def visible_to(principal: Principal, model) -> ColumnElement[bool]:
    # '' is never a valid group or label (app/kit/http/schemas.py `Tag`), so it stands in for "none"
    # in the array literals; a caller in no group sees no group row, and the test is left out.
    grouped = and_(model.visibility == "group", in_groups(model, principal.groups)) if principal.groups else false()
    shared = or_(model.visibility == "org", grouped)
    cleared = model.labels.contained_by(_text_array(principal.clearances))
    return and_(
        model.org_id == principal.org_id,
        or_(model.owner_id == principal.user_id, and_(shared, cleared)),
        in_view(principal.view, model),  # main, a branch, or either as of an instant
    )


def in_org(principal: Principal, model) -> ColumnElement[bool]:
    """Org-only filter for tables without an item scope (jobs, lineage edges, audit); for the
    branched ones (lineage edges, jobs), only the rows of the principal's view."""
    return and_(model.org_id == principal.org_id, in_view(principal.view, model))


def can_see(principal: Principal, *, org_id, owner_id, visibility: str, groups, labels) -> bool:
    """The same rule in Python, for objects already loaded (e.g. lineage nodes, derived scopes)."""
    if org_id != principal.org_id:
        return False
    if owner_id == principal.user_id:
        return True
    shared = visibility == "org" or (visibility == "group" and bool(set(groups) & set(principal.groups)))
    return shared and set(labels) <= set(principal.clearances)


def assert_may_modify(principal: Principal, item, what: str) -> None:
    """Owners change their own items; stewards and admins any item they can see (else 403)."""
    from app.kit.errors import Forbidden

    if item.owner_id != principal.user_id and not principal.has_role("steward", "admin"):
        raise Forbidden(f"only the owner, a steward or an admin may change this {what}")


def assert_may_share(principal: Principal, visibility: str, groups) -> None:
    """Writing an item shared with a group puts it in front of that group: only its members (and
    admins) may. Otherwise anyone could plant items in a group's searches and contexts."""
    from app.kit.errors import Forbidden

    if visibility == "group" and not set(groups) <= set(principal.groups) and not principal.has_role("admin"):
        outside = sorted(set(groups) - set(principal.groups))
        raise Forbidden(f"you are not a member of group(s) {', '.join(outside)}", code="not_a_group_member")


def assert_may_shape_profile(principal: Principal, visibility: str, *, owner_id=None) -> None:
    """An agent's shared instructions and skills are pinned into everyone's context for that agent
    (app/context/agent.py): only stewards and admins write them shared (and the owner of an existing
    one changes it). A member's own private ones stay theirs to write (else 403)."""
    from app.kit.errors import Forbidden

    if visibility != "private" and not principal.has_role("steward", "admin") and owner_id != principal.user_id:
        raise Forbidden(
            "only a steward or an admin may write an agent's shared instructions and skills; write it private, or ask one",
            code="agent_profile_restricted",
        )
