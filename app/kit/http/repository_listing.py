"""The WHERE terms of a filtered keyset page over an item table (app/kit/http/listing.py); the caller
adds visible_to, so a filter can only narrow what the principal may see."""

from __future__ import annotations

from sqlalchemy import ColumnElement, Select, literal

from app.kit.http.listing import ItemFilters


def item_terms(model, f: ItemFilters, time_column) -> list[ColumnElement[bool]]:
    terms = []
    if f.kinds:
        terms.append(model.kind.in_(f.kinds))
    if f.owner is not None:
        terms.append(model.owner_id == f.owner)
    if f.visibility:
        terms.append(model.visibility == f.visibility)
    if f.group:
        terms.append(model.groups.contains([f.group]))
    if f.label:
        terms.append(model.labels.contains([f.label]))
    if f.since:
        terms.append(time_column >= f.since)
    if f.until:
        terms.append(time_column < f.until)
    if f.after is not None:
        terms.append(model.id > f.after)
    return terms or [literal(True)]


def keyset(stmt: Select, model, f: ItemFilters) -> Select:
    """Ordered by the primary key's id (org_id leads it and visible_to pins it): an index range scan."""
    return stmt.order_by(model.id).limit(f.limit)
