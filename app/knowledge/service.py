"""Knowledge assets and their chunks. Re-ingesting unchanged content changes nothing; changed
content replaces the chunks (old chunk ids stay in lineage; the audit log records the swap).

In a branch (app/kit/tenancy/view.py) bootstrap writes copy-on-write: a source whose asset lies below the
branch (main's, a parent branch's) and has changed gets a new asset of the branch's own, and the
one below is masked with its chunks and nodes; main's rows are never touched."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.audit.service import record
from app.cartridges.service import erase as erase_cartridges
from app.cartridges.service import mark_stale
from app.kit.database.db import is_below, view_of
from app.kit.tenancy.repository_view import add_mask
from app.kit.tenancy.scope import Scope
from app.kit.text import sha256
from app.knowledge import repository as repo
from app.knowledge.models import Chunk, KnowledgeAsset, KnowledgeNode
from app.lineage.service import add_edge
from app.memories import lifecycle


@dataclass
class AssetIn:
    kind: str
    uri: str
    title: str
    content_hash: str
    chunks: list[str]
    metadata: dict


def upsert_asset(
    db: Session,
    embedder,
    *,
    org_id: uuid.UUID,
    owner_id: uuid.UUID,
    scope: Scope,
    item: AssetIn,
    count_tokens,
    job_id: uuid.UUID | None = None,
    vectors: list | None = None,
    token_counts: list[int] | None = None,
    bulk: bool = False,
) -> tuple[str, KnowledgeAsset]:
    """Returns ('created' | 'updated' | 'unchanged', asset). `vectors` and `token_counts`, when
    given, are the chunks' embeddings and token counts made ahead (bootstrap embeds the next
    sources while this one is written); `bulk` writes the chunks and their lineage with one
    set-based statement each instead of the ORM's rows (the same rows, scope and edges)."""
    existing = repo.asset_by_uri(db, org_id, item.uri)
    if existing is not None and existing.content_hash == item.content_hash and existing.status == "active":
        return "unchanged", existing
    now, branch = datetime.now(UTC), view_of(db).branch_id
    if existing is None or is_below(db, existing):
        if existing is not None:  # the branch's own copy replaces the one below, for the branch only
            add_mask(db, org_id=org_id, branch_id=branch, item_type="knowledge_assets", key=existing.id, at=now)
        asset = KnowledgeAsset(
            id=uuid.uuid4(),
            org_id=org_id,
            owner_id=owner_id,
            kind=item.kind,
            source_uri=item.uri,
            title=item.title,
            content_hash=item.content_hash,
            metadata_=item.metadata,
            visibility=scope.visibility,
            groups=list(scope.groups),
            labels=list(scope.labels),
            branch_id=branch,
        )
        db.add(asset)
        db.flush()
        outcome, old_chunks, derived = ("created" if existing is None else "updated"), [], None
    else:
        asset = existing
        old_chunks = repo.delete_chunks(db, org_id, asset.id)
        # Memories derived from the replaced chunks follow the deletion cascade (app/memories/cascade.py).
        derived = lifecycle.forget_sources(db, org_id, [("chunk", old_chunks)], removed_source=asset.id)
        asset.content_hash, asset.title, asset.metadata_ = item.content_hash, item.title, item.metadata
        asset.status, asset.updated_at = "active", now
        outcome = "updated"
        mark_stale(db, org_id, [asset.id], reason=f"asset {asset.id} changed")
    vecs = embedder.embed(item.chunks) if vectors is None else vectors
    counts = token_counts if token_counts is not None else [count_tokens(t) for t in item.chunks]
    if bulk:
        return _bulk_chunks(
            db, asset, item, vecs, outcome=outcome, old_chunks=old_chunks, derived=derived, counts=counts, job_id=job_id
        )
    rows = [
        Chunk(
            id=uuid.uuid4(),
            org_id=org_id,
            owner_id=asset.owner_id,
            asset_id=asset.id,
            ord=i,
            text=t,
            content_hash=sha256(t),
            token_count=counts[i],
            embedding=v,
            visibility=asset.visibility,
            groups=asset.groups,
            labels=asset.labels,
            branch_id=branch,
        )
        for i, (t, v) in enumerate(zip(item.chunks, vecs))
    ]
    db.add_all(rows)
    db.flush()
    for c in rows:
        add_edge(
            db,
            org_id=org_id,
            from_type="chunk",
            from_id=c.id,
            to_type="asset",
            to_id=asset.id,
            relation="chunk_of",
            job_id=job_id,
        )
    _audit(db, asset, item, outcome=outcome, n=len(rows), old_chunks=old_chunks, derived=derived, job_id=job_id)
    return outcome, asset


def _bulk_chunks(db: Session, asset, item: AssetIn, vecs, *, outcome: str, old_chunks, derived, counts, job_id):
    """upsert_asset's chunk rows, `chunk_of` edges and audit event, each in one statement."""
    branch = view_of(db).branch_id
    rows = [
        dict(id=uuid.uuid4(), ord=i, text=t, content_hash=sha256(t), token_count=counts[i], embedding=v)
        for i, (t, v) in enumerate(zip(item.chunks, vecs))
    ]
    repo.insert_chunks(db, asset, rows, branch=branch)
    edges = [dict(from_type="chunk", from_id=r["id"], to_type="asset", to_id=asset.id, relation="chunk_of") for r in rows]
    repo.insert_edges(db, asset.org_id, edges, branch=branch, job_id=job_id)
    _audit(db, asset, item, outcome=outcome, n=len(rows), old_chunks=old_chunks, derived=derived, job_id=job_id)
    return outcome, asset


def _audit(db: Session, asset, item: AssetIn, *, outcome: str, n: int, old_chunks, derived, job_id) -> None:
    record(
        db,
        org_id=asset.org_id,
        actor_id=None,
        action=f"asset.{outcome}",
        target_type="asset",
        target_id=asset.id,
        details={
            "uri": item.uri,
            "chunks": n,
            "replaced_chunks": [str(c) for c in old_chunks],
            "job_id": str(job_id) if job_id else None,
            **(derived.audit() if derived else {}),
        },
    )


def unchanged_uris(db: Session, org_id: uuid.UUID, sources: list[tuple[str, str]]) -> set[str]:
    """Which of (uri, content hash) the transaction's view already holds, active and unchanged:
    what `upsert_asset` would skip (a bulk writer does not embed them)."""
    out = set()
    for uri, content_hash in sources:
        a = repo.asset_by_uri(db, org_id, uri, for_update=False)
        if a is not None and a.content_hash == content_hash and a.status == "active":
            out.add(uri)
    return out


def active_assets(db: Session, org_id: uuid.UUID, kind: str, uri_prefix: str = "") -> list[KnowledgeAsset]:
    return repo.active_assets(db, org_id, kind, uri_prefix)


def set_status(db: Session, org_id: uuid.UUID, assets: list[KnowledgeAsset], status: str) -> None:
    """E.g. `dropped` for tables gone from a bootstrapped schema; cartridges trained on them go
    stale. In a branch, an asset below it is masked instead (gone for the branch only)."""
    now, branch = datetime.now(UTC), view_of(db).branch_id
    own = []
    for a in assets:
        if is_below(db, a):
            add_mask(db, org_id=org_id, branch_id=branch, item_type="knowledge_assets", key=a.id, at=now)
        else:
            own.append(a.id)
    if own:
        repo.set_status(db, org_id, own, status)
        mark_stale(db, org_id, own, reason=f"assets {status}")


def live_table_columns(db: Session, org_id: uuid.UUID) -> dict[str, set[str]]:
    """{table: its columns} of the org's active table-schema assets (what schema hints must match)."""
    return {
        a.metadata_.get("table"): set(a.metadata_.get("columns", [])) for a in repo.active_assets(db, org_id, "table_schema", "")
    }


def forget_owner(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID) -> dict:
    """Right to be forgotten: the user's assets (with their chunks) are removed, cartridges trained
    on them are erased, and memories derived from them or their chunks follow the deletion cascade
    (`derived`: app.memories.cascade.Reached). Returns counts, `chunk_hashes`, whose KV the
    inference tier should drop, and `cartridge_ids`, whose files go, once this transaction has committed."""
    owned = repo.owned_assets(db, org_id, owner_id)
    ids = [i for i, _ in owned]
    erased = erase_cartridges(db, org_id, ids, reason="source assets erased")
    hashes = repo.chunk_hashes_of_assets(db, org_id, ids) if owned else []
    chunks = repo.chunk_ids_of_assets(db, org_id, ids) if owned else []
    removed = repo.delete_owned_by(db, org_id, owner_id)
    derived = lifecycle.forget_sources(db, org_id, [("asset", ids), ("chunk", chunks)], removed_source=owner_id)
    return {
        "cartridges_erased": len(erased),
        "assets_removed": removed,
        "asset_hashes": len(owned),
        "chunk_hashes": hashes,
        "cartridge_ids": erased,
        "derived": derived,
    }


def replace_nodes(db: Session, asset: KnowledgeAsset, nodes: list[dict]) -> None:
    """An asset's knowledge-tree nodes (bootstrap's enrich step), rebuilt whole; each node carries
    the asset's owner and scope, so `visible_to` applies to it as to the asset."""
    repo.replace_nodes(
        db,
        asset.org_id,
        asset.id,
        [
            KnowledgeNode(
                org_id=asset.org_id,
                asset_id=asset.id,
                owner_id=asset.owner_id,
                visibility=asset.visibility,
                groups=list(asset.groups),
                labels=list(asset.labels),
                branch_id=asset.branch_id,
                **n,
            )
            for n in nodes
        ],
    )


def same_scope_terms(db: Session, org_id: uuid.UUID, *, owner_id, visibility: str, groups, labels) -> list:
    return repo.same_scope_terms(db, org_id, owner_id=owner_id, visibility=visibility, groups=groups, labels=labels)
