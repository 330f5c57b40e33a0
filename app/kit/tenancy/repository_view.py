"""The SQL of views (app/kit/tenancy/view.py): which rows of a table a view holds, and which memory
versions had which status in it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, false, inspect, literal, or_, select, true
from sqlalchemy.sql.elements import ColumnElement

from app.kit.tenancy.view import Layer, View
from app.kit.tenancy.view_models import BranchMask

# The memory state and the org's knowledge; jobs carry a branch but are not state.
VIEWED = ("memories", "episodes", "lineage_edges", "knowledge_assets", "chunks", "knowledge_nodes")
# What hides a row of a lower layer: a mask of (item_type, the row's key column). A memory is
# masked by its root (all its versions); an asset's chunks and nodes go with their asset.
MASKED_AS = {
    "memories": ("memories", "root_id"),
    "chunks": ("knowledge_assets", "asset_id"),
    "knowledge_nodes": ("knowledge_assets", "asset_id"),
}


def _table(model) -> str:
    return inspect(model).mapper.local_table.name


def in_layer(model, branch_id):
    """Rows written in one branch (None: main's)."""
    return model.branch_id.is_(None) if branch_id is None else model.branch_id == branch_id


def _masked_as(model) -> tuple[str, object]:
    """(item_type, key column) of the mask that hides a row of `model` (any other item: its id)."""
    table = _table(model)
    item_type, col = MASKED_AS.get(table, (table, "id"))
    return item_type, getattr(model, col)


def _time(model) -> str | None:
    for col in ("recorded_at", "created_at", "at"):
        if hasattr(model, col):
            return col
    return None


def _not_masked(model, layer: Layer) -> ColumnElement[bool]:
    item_type, key = _masked_as(model)
    conds = [
        BranchMask.org_id == model.org_id,
        BranchMask.branch_id == layer.branch_id,
        BranchMask.item_type == item_type,
        BranchMask.key == key,
    ]
    if layer.cutoff is not None:
        conds.append(BranchMask.at <= layer.cutoff)
    return ~select(literal(1)).where(*conds).correlate(model).exists()


def _existed(model, cutoff: datetime | None) -> ColumnElement[bool]:
    col = _time(model)
    if cutoff is None or col is None:
        return true()
    return getattr(model, col) <= cutoff


def in_view(view: View, model) -> ColumnElement[bool]:
    """Rows of `model` that exist in `view` (every version of a memory that existed then: which
    version was *current* is `memory_state`'s question). Tables without branches: all rows."""
    if _table(model) not in VIEWED or view.every_branch:
        return true()
    if view.is_plain:
        return model.branch_id.is_(None)
    parts = []
    for i, layer in enumerate(view.layers):
        own = in_layer(model, layer.branch_id)
        parts.append(and_(own, _existed(model, layer.cutoff), *[_not_masked(model, near) for near in view.layers[:i]]))
    return or_(*parts)


def memory_state(view: View, model, statuses) -> ColumnElement[bool]:
    """Memory versions that had one of `statuses` in `view`. Now, a version's status column says
    it; at a cutoff c, a version superseded after c was still active then (a version recorded
    after c is already out by `in_view`). Quarantine and deletion are today's (see the module)."""
    statuses = tuple(statuses)
    if view.every_branch or all(layer.cutoff is None for layer in view.layers):
        return model.status.in_(statuses)
    parts = []
    for layer in view.layers:
        own = in_layer(model, layer.branch_id)
        if layer.cutoff is None:
            parts.append(and_(own, model.status.in_(statuses)))
            continue
        c = layer.cutoff
        still = [s for s in statuses if s != "superseded"]
        was_active = and_(model.status == "superseded", model.superseded_at > c) if "active" in statuses else false()
        was_superseded = and_(model.status == "superseded", model.superseded_at <= c) if "superseded" in statuses else false()
        parts.append(and_(own, or_(model.status.in_(still) if still else false(), was_active, was_superseded)))
    return or_(*parts)


def status_in(view: View, row) -> str:
    """The status a memory version `row` (already found in `view`) has there: `memory_state`'s
    rule for one row in Python. A version of a layer with a cutoff (main read in a branch forked at
    c) that was superseded after c is still the current one there: the branch may patch it even
    though main has moved on. Quarantine is today's (see the module)."""
    if row.status != "superseded" or view.every_branch:
        return row.status
    for layer in view.layers:
        if row.branch_id == layer.branch_id:
            c = layer.cutoff
            return "active" if c is not None and row.superseded_at is not None and row.superseded_at > c else row.status
    return row.status


def add_mask(db, *, org_id, branch_id, item_type: str, key, at: datetime) -> None:
    """Hide item `key` of table `item_type` of every layer below `branch_id` from `at` on."""
    from sqlalchemy.dialects.postgresql import insert

    db.execute(
        insert(BranchMask)
        .values(org_id=org_id, branch_id=branch_id, item_type=item_type, key=key, at=at)
        .on_conflict_do_nothing()
    )
