"""Lineage: writing edges, and reading the graph with access applied to every node.

A node the caller may not see is a redacted placeholder for auditors (type and id only) and is
omitted, with its edges, for everyone else. A node whose row was deleted shows `deleted: true`.
"""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.feedback import service as feedback
from app.kit.database.db import view_of
from app.kit.errors import NotFound
from app.kit.registry import ITEM_TYPES, text_of
from app.lineage import repository as repo
from app.lineage.models import LineageEdge


def add_edge(
    db: Session,
    *,
    org_id: uuid.UUID,
    from_type: str,
    from_id: uuid.UUID,
    to_type: str,
    to_id: uuid.UUID,
    relation: str,
    job_id: uuid.UUID | None = None,
) -> None:
    db.add(
        LineageEdge(
            org_id=org_id,
            from_type=from_type,
            from_id=from_id,
            to_type=to_type,
            to_id=to_id,
            relation=relation,
            job_id=job_id,
            branch_id=view_of(db).branch_id,
        )
    )


def record_retrieval(
    db: Session, principal: Principal, *, kind: str, query: str, params: dict, items: list[dict], rid: uuid.UUID | None = None
) -> uuid.UUID:
    """What was handed out to whom: every read path that returns content records one (search,
    context, get, lineage, session context), so "who saw this item" is one query. `rid`: the
    record's id when the caller chose it beforehand (a context decides how it is served by it)."""
    view = principal.view
    if not view.is_plain:  # which state shaped the answer: a branch, an instant
        params = {**params, "branch": view.branch, "as_of": view.as_of.isoformat() if view.as_of else None}
    rid = rid or uuid.uuid4()
    repo.add_retrieval(
        db, id=rid, org_id=principal.org_id, actor_id=principal.user_id, kind=kind, query=query, params=params, items=items
    )
    return rid


def record_listing(db: Session, principal: Principal, type_: str, rows: list, **params: str) -> uuid.UUID:
    """A page of a list endpoint handed out (its rows' content): a `list` retrieval of its items."""
    return record_retrieval(
        db,
        principal,
        kind="list",
        query="",
        params={"type": type_, **params},
        items=[{"type": type_, "id": str(r.id)} for r in rows],
    )


def record_read(db: Session, principal: Principal, kind: str, type_: str, id_) -> uuid.UUID:
    """A retrieval record for one item whose content a read path (GET, session context) handed out."""
    return record_retrieval(db, principal, kind=kind, query="", params={}, items=[{"type": type_, "id": str(id_)}])


def read_one(db: Session, principal: Principal, type_: str, fetch, read=None):
    """GET of one item: `fetch(rdb)` run where `read` says (a replica, app.kit.database.replicas), and a
    retrieval record that the caller read its content (written in `db`, the primary)."""
    from app.kit.database.replicas import on

    item = (read or on(db))(fetch)
    record_read(db, principal, "get", type_, item.id)
    return item


def _describe(type_: str, row) -> dict:
    return {
        "type": type_,
        "id": str(row.id),
        "text": text_of(type_, row)[:500],
        "visibility": row.visibility,
        "groups": list(row.groups),
        "labels": list(row.labels),
        "owner_id": str(row.owner_id),
        "status": getattr(row, "status", None),
        "kind": getattr(row, "kind", None),
    }


def graph(db: Session, principal: Principal, type_: str, id_: uuid.UUID, *, direction: str, depth: int, read=None) -> dict:
    """The lineage graph around one item, read where `read` says (a read replica, app.kit.database.replicas);
    the retrieval event for the nodes whose text it hands out is written in `db`."""
    from app.kit.database.replicas import on

    out = (read or on(db))(lambda rdb: _graph(rdb, principal, type_, id_, direction, depth))
    with_text = [{"type": n["type"], "id": n["id"]} for n in out["nodes"] if "text" in n]
    useful = feedback.utilities(db, principal.org_id, [n["id"] for n in with_text if n["type"] == "memory"])
    for n in out["nodes"]:
        if n["type"] == "memory" and "text" in n and (u := useful.get(n["id"])) is not None:
            n["utility"] = u.model_dump()
    if with_text:
        record_retrieval(
            db, principal, kind="lineage", query="", params={"root": {"type": type_, "id": str(id_)}}, items=with_text
        )
    return out


def _graph(db: Session, principal: Principal, type_: str, id_: uuid.UUID, direction: str, depth: int) -> dict:
    auditor = principal.has_role("auditor", "admin")
    if type_ not in ITEM_TYPES:
        raise NotFound(f"unknown item type {type_!r}")
    model = ITEM_TYPES[type_].model
    start_visible = repo.load_visible(db, principal, model, [id_])
    if not start_visible and not (auditor and repo.existing_ids(db, principal.org_id, model, [id_])):
        raise NotFound(f"{type_} not found")
    es = repo.edges(db, principal.org_id, type_, id_, direction=direction, depth=depth, as_of=principal.view.as_of)
    wanted: dict[str, set] = {t: set() for t in ITEM_TYPES}
    wanted[type_].add(id_)
    for e in es:
        for t, i in ((e.from_type, e.from_id), (e.to_type, e.to_id)):
            if t in wanted:
                wanted[t].add(i)
    nodes, shown = [], set()
    for t, ids in wanted.items():
        visible = repo.load_visible(db, principal, ITEM_TYPES[t].model, ids)
        existing = repo.existing_ids(db, principal.org_id, ITEM_TYPES[t].model, ids - set(visible))
        for i in ids:
            if i in visible:
                nodes.append(_describe(t, visible[i]))
            elif i in existing:
                if not auditor:
                    continue
                nodes.append({"type": t, "id": str(i), "redacted": True})
            elif auditor:  # for others a gone node is indistinguishable from a hidden one: omitted
                nodes.append({"type": t, "id": str(i), "deleted": True})
            else:
                continue
            shown.add((t, i))
    edges = [
        {
            "from": {"type": e.from_type, "id": str(e.from_id)},
            "to": {"type": e.to_type, "id": str(e.to_id)},
            "relation": e.relation,
            "job_id": str(e.job_id) if e.job_id else None,
            "at": e.at.isoformat(),
        }
        for e in sorted(es, key=lambda e: e.at)
        if (e.from_type, e.from_id) in shown and (e.to_type, e.to_id) in shown
    ]
    return {"nodes": nodes, "edges": edges}


def retrieval(db: Session, principal: Principal, retrieval_id: uuid.UUID) -> dict:
    ev = repo.retrieval(db, principal, retrieval_id)
    # Your own retrievals, or any in the org for auditors and admins.
    if ev is None or (ev.actor_id != principal.user_id and not principal.has_role("auditor", "admin")):
        raise NotFound("retrieval not found")
    out = {
        "id": str(ev.id),
        "actor": str(ev.actor_id),
        "kind": ev.kind,
        "query": ev.query,
        "at": ev.at.isoformat(),
        "params": ev.params,
        "items": [{"type": i["type"], "id": i["id"], "score": i.get("score")} for i in ev.items],
    }
    if said := feedback.of_retrieval(db, principal, ev.id):
        out["feedback"] = said
    return out


def retrievals_of(db: Session, principal: Principal, item_id: uuid.UUID, limit: int) -> list[dict]:
    rows = repo.retrievals_with_item(
        db, principal, item_id, limit, only_actor=None if principal.has_role("auditor", "admin") else principal.user_id
    )
    return [
        {
            "id": str(r.id),
            "actor": str(r.actor_id),
            "kind": r.kind,
            "at": r.at.isoformat(),
            "score": next((i.get("score") for i in r.items if i["id"] == str(item_id)), None),
        }
        for r in rows
    ]


def sources_by_relation(db: Session, org_id: uuid.UUID, relation: str) -> dict[uuid.UUID, list[tuple[str, uuid.UUID]]]:
    """{from_id: [(to_type, to_id), ...]} over every edge of `relation` in the org."""
    out: dict = {}
    for from_id, to_type, to_id in repo.edges_by_relation(db, org_id, relation):
        out.setdefault(from_id, []).append((to_type, to_id))
    return out


def forget_retrievals_by(db: Session, org_id: uuid.UUID, actor_id: uuid.UUID) -> int:
    """Right to be forgotten: the record of what this user retrieved goes too."""
    return repo.delete_retrievals_by(db, org_id, actor_id)
