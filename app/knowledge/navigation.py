"""Navigation of the knowledge tree: GET /v1/knowledge/tree and /v1/knowledge/nodes/{id}.

Paths: `<catalog>/<schema>/<table>/<column>` for database sources (the catalog is the source's
database name), `docs/<folder>/<file>/<section>` for documents, `glossary/<file>/<term>`.
Every node carries its asset's scope, and every read here goes through `visible_to` (in the
repository): a node of an asset the caller may not see does not exist for them (404 by id or
path), and a shared ancestor (a catalog) is listed only when one of its visible assets has it.
"""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.kit.errors import NotFound
from app.knowledge import repository as repo
from app.lineage.service import record_read

MAX_CHILDREN = 1000
SHORT = 160


def _child(r) -> dict:
    out = {"id": str(r.id), "kind": r.kind, "name": r.name, "path": r.path}
    if r.summary:
        out["summary"] = r.summary[:SHORT]
    return out


def tree(db: Session, principal: Principal, path: str | None, *, limit: int = MAX_CHILDREN, after: str | None = None) -> dict:
    """A node and one page of its children (by path, after `after`), in one statement. `next`
    is the cursor for the following page (the last path listed) when there are more."""
    path = (path or "").strip("/")
    rows = repo.listing(db, principal, path, limit + 1, after=after, short=SHORT)
    if path:
        if not rows or rows[0].path != path:
            raise NotFound("no such knowledge node")
        head = {"id": rows[0].id, "kind": rows[0].kind, "name": rows[0].name, "path": path}
        rows = rows[1:]
    else:
        head = {"id": None, "kind": "root", "name": "", "path": ""}
    more = len(rows) > limit
    kids = [_child(r) for r in rows[:limit]]
    return {"node": head, "children": kids, "truncated": more, "next": kids[-1]["path"] if more else None}


def node(db: Session, principal: Principal, node_id: uuid.UUID) -> dict:
    n = repo.node(db, principal, node_id=node_id)
    if n is None:
        raise NotFound("no such knowledge node")
    kids = [_child(r) for r in repo.children(db, principal, n.path, MAX_CHILDREN)]
    links: list[dict] = []
    if n.kind == "column":
        links += [
            {"type": "glossary_term", "id": str(t.id), "name": t.name, "path": t.path, "text": t.text}
            for t in repo.nodes_by_refs(db, principal, n.refs, "term")
        ]
    elif n.kind == "term":
        links += [
            {"type": "column", "id": str(c.id), "name": c.name, "path": c.path}
            for c in repo.nodes_by_refs(db, principal, n.refs, "column")
        ]
    elif n.kind == "table":
        cols = [r for c in n.meta.get("columns", []) for r in (c.get("ref"),) if r]
        links += [
            {"type": "glossary_term", "id": str(t.id), "name": t.name, "path": t.path, "text": t.text}
            for t in repo.nodes_by_refs(db, principal, cols, "term")
        ]
    links += [{"type": "join", **j} for j in n.meta.get("joins", [])]
    if n.kind in ("table", "document", "glossary", "term"):
        links += [
            {"type": "memory", "id": str(m.id), "kind": m.kind, "text": m.text}
            for m in repo.asset_memories(db, principal, n.asset_id)
            if n.kind != "term" or n.name.lower() in m.text.lower()
        ]
    links += [
        {
            "type": "lineage",
            "relation": e.relation,
            "to": {"type": e.to_type, "id": str(e.to_id)},
            "title": e.title,
            "job_id": str(e.job_id) if e.job_id else None,
            "at": e.at.isoformat(),
        }
        for e in repo.asset_lineage(db, principal, n.asset_id)
    ]
    record_read(db, principal, "knowledge_node", "knowledge_node", n.id)
    return {
        "id": str(n.id),
        "kind": n.kind,
        "name": n.name,
        "path": n.path,
        "text": n.text,
        "asset_id": str(n.asset_id),
        "children": kids,
        "links": links,
    }


def render(n: dict) -> str:
    """A node (as `node` returns it) as text for an agent: description, children, linked knowledge."""
    text = n["text"] or ""
    lines = [f"{n['kind']} {n['path']}" + (f": {text}" if text else "")]
    if n["kind"] != "table":  # a table's text already lists its columns
        lines += [f"- {c['kind']} {c['path']}" + (f" — {c['summary']}" if c.get("summary") else "") for c in n["children"]]
    for link in n["links"]:  # what the text does not say already
        if link["type"] == "glossary_term" and link["name"] + ":" not in text:
            lines.append(f"glossary {link['name']}: {link['text']}")
        elif link["type"] == "join" and f"{link['from']} = {link['to']}" not in text:
            lines.append(f"join {link['from']} = {link['to']} ({link['via']})")
        elif link["type"] == "memory" and n["kind"] != "table":
            lines.append(f"{link['kind']}: {link['text']}")
    return "\n".join(lines)


def browse(db: Session, principal: Principal, path: str | None) -> str:
    """The `browse` tool's answer as text: a node's description and its children, one per line."""
    path = (path or "").strip("/")
    t = tree(db, principal, path)
    lines = []
    if path:
        n = repo.node(db, principal, path=path)
        lines.append(f"{n.kind} {n.path}" + (f": {n.text}" if n.text else ""))
    lines += [f"- {c['kind']} {c['path']}" + (f" — {c['summary']}" if c.get("summary") else "") for c in t["children"]]
    return "\n".join(lines) or "(empty)"
