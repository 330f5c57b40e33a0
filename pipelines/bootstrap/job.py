"""bootstrap job: documents, a database schema and a glossary -> assets, chunks, memories.

Each source is one transaction together with the job's checkpoint, and unchanged sources are
skipped by content hash, so a killed run resumes where it stopped and a re-run changes nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from app.jobs.params import BootstrapParams
from app.jobs.runner import JobContext
from app.kit.database.db import is_below
from app.kit.runtime.embedding import token_counter
from app.kit.runtime.tier import TierClient
from app.kit.tenancy.scope import Scope
from app.kit.text import sha256
from app.knowledge import service as knowledge
from app.knowledge.service import AssetIn, upsert_asset
from app.lineage.service import add_edge
from app.memories import versioning
from app.orgs.service import job_owner
from pipelines.bootstrap import enrich
from pipelines.bootstrap import sources as src
from pipelines.bootstrap.ahead import Documents

if TYPE_CHECKING:
    from app.jobs.models import Job

log = logging.getLogger("memscale.bootstrap")
BULK = True  # documents embedded ahead of their writes, chunks and lineage set-based (False: row by row, inline)


def _resolve(ctx: JobContext, job: Job, rel: str) -> Path:
    """API jobs may read only under the bootstrap root; operator (CLI) jobs may name any path."""
    root = (ctx.settings.data_dir / "sources").resolve()
    path = Path(rel)
    if job.created_by is None:
        return path.resolve()
    resolved = (root / path).resolve()
    if not resolved.is_relative_to(root):
        raise ValueError("path escapes the bootstrap root")
    return resolved


def run(ctx: JobContext, job: Job) -> dict:
    p = BootstrapParams.model_validate(job.params)
    scope = Scope(p.visibility, None, tuple(p.groups), tuple(p.labels))
    stats = {
        "documents": 0,
        "created": 0,
        "updated": 0,
        "unchanged": 0,
        "chunks": 0,
        "tables": 0,
        "tables_dropped": 0,
        "schema_hints": 0,
        "glossary_terms": 0,
    }
    count = token_counter(ctx.resources.embedder)
    with ctx.tx() as db:
        owner = job_owner(db, ctx.org_id, job.created_by)
    if p.visibility == "private":
        scope = Scope("private", owner, (), scope.labels)

    work: list[tuple[str, object]] = []
    glossary = src.read_glossary(_resolve(ctx, job, p.glossary)) if p.glossary else []
    if glossary:  # first: the enrich step links its terms to the tables' columns
        work.append(("glossary", glossary))
    if p.path:
        work += [("doc", d) for d in src.read_folder(_resolve(ctx, job, p.path))]
    schema_url = _source_url(ctx, job, p.schema_url) if p.schema_url else None
    tables = _inspect(schema_url) if schema_url else []
    work += [("table", t) for t in tables]
    new_chunk_texts: list[str] = []
    en = _Enrichment(schema_url, tables, glossary, enabled=p.enrich)
    stats.update({"enriched_tables": 0, "enriched_documents": 0, "linked_terms": 0})
    with ctx.tx() as db:
        en.prior_terms(db, ctx.org_id, owner, scope)

    with ctx.tx() as db:
        embedder = ctx.resources.embedder_for(db, ctx.org_id)  # the org's model (its old one during a re-embedding)
    docs = Documents(ctx, work, count, embedder) if BULK else None
    try:
        for i, (what, item) in enumerate(work):
            with ctx.tx() as db:
                _one(
                    ctx,
                    db,
                    i,
                    what,
                    item,
                    p,
                    owner=owner,
                    scope=scope,
                    count=count,
                    stats=stats,
                    en=en,
                    docs=docs,
                    new_chunk_texts=new_chunk_texts,
                )
                ctx.checkpoint(db, progress=(i + 1) / max(1, len(work) + 1), stats=stats)
    finally:
        if docs is not None:
            docs.close()
    if schema_url:
        with ctx.tx() as db:
            prefix = f"schema:{src.redact_url(schema_url)}#"
            present = {f"{prefix}{t.qualified}" for t in tables}
            gone = [a for a in knowledge.active_assets(db, ctx.org_id, "table_schema", prefix) if a.source_uri not in present]
            knowledge.set_status(db, ctx.org_id, gone, "dropped")
            stats["tables_dropped"] = len(gone)
            ctx.checkpoint(db, progress=1.0, stats=stats)
    _precompute_kv(ctx, new_chunk_texts)
    return stats


def _one(
    ctx, db, i: int, what: str, item, p, *, owner, scope: Scope, count, stats: dict, en, docs, new_chunk_texts: list
) -> None:
    """One source of the job (the unit of commit: its asset, chunks, lineage, audit, derived
    memories and nodes, with the job's checkpoint)."""
    if what == "table":
        if docs is not None:
            docs.close()  # the documents are written: the model is the job thread's again
        stats["tables"] += 1
        _table(ctx, db, item, en.url, owner, scope, count, stats, en)
        return
    if what != "doc":
        _glossary(ctx, db, item, p.glossary, owner, scope, count, stats, en)
        return
    stats["documents"] += 1
    chunks = docs.chunks(i) if docs is not None else src.chunk_text(item.text, count)
    embedder = ctx.resources.embedder_for(db, ctx.org_id)  # held to the commit: no switch in between
    # vectors embedded ahead serve only while the org's model is the one they were made by (a
    # re-embedding may have switched it since the job started): otherwise embedded here
    ahead = docs if docs is not None and docs.model_embedder.model == embedder.model else None
    outcome, asset = upsert_asset(
        db,
        ahead.embedder() if ahead is not None else embedder,
        org_id=ctx.org_id,
        owner_id=owner,
        scope=scope,
        count_tokens=count,
        job_id=ctx.job_id,
        item=AssetIn("document", item.uri, item.title, item.content_hash, chunks, {"enrich_version": enrich.ENRICH_VERSION}),
        vectors=ahead.vectors(i) if ahead is not None else None,
        token_counts=docs.counts(i) if docs is not None else None,
        bulk=docs is not None,
    )
    stats[outcome] += 1
    if en.enabled and _needs_nodes(db, outcome, asset):
        _save_nodes(db, asset, enrich.document_nodes(item.uri, item.title, item.text))
        stats["enriched_documents"] += 1
    if outcome != "unchanged":
        stats["chunks"] += len(chunks)
        new_chunk_texts += chunks


class _Enrichment:
    """What the enrich step needs across a job: the source's joins and statistics, and the
    glossary terms (this job's and earlier same-scope glossaries') to link to columns."""

    def __init__(self, url: str | None, tables: list, glossary: list, *, enabled: bool = True):
        self.url, self.tables, self.enabled = url, tables, enabled
        self.catalog = _catalog(url) if url else ""
        self.joins = enrich.join_paths(tables) if tables else {}
        self.columns = {f"{t.qualified}.{c['name']}".lower() for t in tables for c in t.columns}
        self.terms = [enrich.TermRef(e.term, e.text(), e.mapping, enrich.term_refs(e.mapping, self.columns)) for e in glossary]
        self.earlier: list[enrich.TermRef] = []

    def prior_terms(self, db, org_id, owner, scope: Scope) -> None:
        if not self.tables or not self.enabled:
            return
        mine = {t.term.lower() for t in self.terms}
        for n in knowledge.same_scope_terms(
            db, org_id, owner_id=owner, visibility=scope.visibility, groups=scope.groups, labels=scope.labels
        ):
            mapping = n.meta.get("mapping", "")
            if n.name.lower() not in mine:
                self.earlier.append(enrich.TermRef(n.name, n.text, mapping, enrich.term_refs(mapping, self.columns), n.asset_id))

    def stats(self, t: src.TableInfo) -> dict:
        """Column statistics where the source allows them ({} where it does not)."""
        from sqlalchemy import create_engine

        from pipelines.bootstrap import repository as source_repo

        eng = create_engine(self.url)
        try:
            with eng.connect() as conn:
                return source_repo.column_stats(conn, t.name, t.schema, [c["name"] for c in t.columns])
        except Exception as exc:
            log.info("no statistics for %s: %s", t.qualified, type(exc).__name__)
            return {}
        finally:
            eng.dispose()


def _catalog(url: str) -> str:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return Path(u.database).stem if u.database and u.get_backend_name() == "sqlite" else (u.database or u.host or "db")


def _needs_nodes(db, outcome: str, asset) -> bool:
    """A new or changed asset; or an unchanged one enriched by an older version of the step (in a
    branch, only the branch's own: an unchanged asset of main is main's to re-enrich)."""
    stale = (asset.metadata_ or {}).get("enrich_version") != enrich.ENRICH_VERSION
    return outcome != "unchanged" or (stale and not is_below(db, asset))


def _save_nodes(db, asset, nodes: list[enrich.Node]) -> None:
    knowledge.replace_nodes(
        db,
        asset,
        [
            dict(
                id=n.node_id(asset.id),
                kind=n.kind,
                name=n.name,
                path=n.path,
                parent_path=n.parent_path,
                ord=n.ord,
                text=n.text,
                refs=n.refs,
                meta=n.meta,
            )
            for n in nodes
        ],
    )
    asset.metadata_ = {**(asset.metadata_ or {}), "enrich_version": enrich.ENRICH_VERSION}


def _table(ctx, db, t: src.TableInfo, url: str, owner, scope: Scope, count, stats: dict, en: _Enrichment) -> None:
    uri = f"schema:{src.redact_url(url)}#{t.qualified}"
    meta = {"table": t.qualified, "columns": [c["name"] for c in t.columns]}
    if en.enabled:
        e = enrich.enrich_table(t, en.catalog, en.stats(t), en.joins.get(t.qualified, []), en.terms + en.earlier)
        text, hint, used = e.text, e.hint, e.terms
        meta.update({"enrich_version": enrich.ENRICH_VERSION, "catalog": en.catalog, "linked_terms": [x.term for x in e.terms]})
    else:  # the plain extract (what bootstrap wrote before the enrich step)
        e, text, hint, used = None, t.describe(), t.hint(), []
    outcome, asset = upsert_asset(
        db,
        ctx.resources.embedder_for(db, ctx.org_id),
        org_id=ctx.org_id,
        owner_id=owner,
        scope=scope,
        item=AssetIn("table_schema", uri, t.qualified, sha256(text), [text], meta),
        count_tokens=count,
        job_id=ctx.job_id,
    )
    stats[outcome] += 1
    glossaries = sorted({x.asset_id for x in used if x.asset_id is not None}, key=str)
    if e is not None and _needs_nodes(db, outcome, asset):
        _save_nodes(db, asset, e.nodes)
        stats["enriched_tables"] += 1
        stats["linked_terms"] += len(e.terms)
        for gid in glossaries:  # the description was enriched from these glossaries
            add_edge(
                db,
                org_id=ctx.org_id,
                from_type="asset",
                from_id=asset.id,
                to_type="asset",
                to_id=gid,
                relation="enriched_from",
                job_id=ctx.job_id,
            )
    hint_outcome, _ = versioning.upsert_derived(
        db,
        ctx.resources.embedder_for(db, ctx.org_id),
        org_id=ctx.org_id,
        owner_id=owner,
        key=f"schema_hint:{uri}",
        text=hint,
        kind="schema_hint",
        scope=scope,
        sources=[("asset", asset.id)] + [("asset", g) for g in glossaries],
        provenance={"origin": "bootstrap", "schema": {"table": t.qualified, "columns": meta["columns"]}},
        job_id=ctx.job_id,
    )
    stats["schema_hints"] += hint_outcome != "unchanged"


def _glossary(
    ctx, db, entries: list[src.GlossaryEntry], rel: str, owner, scope: Scope, count, stats: dict, en: _Enrichment
) -> None:
    lines = [e.text() for e in entries]
    uri = f"glossary:{Path(rel).name}"
    outcome, asset = upsert_asset(
        db,
        ctx.resources.embedder_for(db, ctx.org_id),
        org_id=ctx.org_id,
        owner_id=owner,
        scope=scope,
        item=AssetIn(
            "glossary",
            uri,
            Path(rel).name,
            sha256("\n".join(lines)),
            lines,
            {"terms": len(lines), "enrich_version": enrich.ENRICH_VERSION},
        ),
        count_tokens=count,
        job_id=ctx.job_id,
    )
    stats[outcome] += 1
    for t in en.terms:
        t.asset_id = asset.id
    if en.enabled and _needs_nodes(db, outcome, asset):
        refs = [enrich.TermRef(e.term, e.text(), e.mapping, enrich.term_refs(e.mapping)) for e in entries]
        _save_nodes(db, asset, enrich.glossary_nodes(Path(rel).name, refs))
    for e in entries:
        o, _ = versioning.upsert_derived(
            db,
            ctx.resources.embedder_for(db, ctx.org_id),
            org_id=ctx.org_id,
            owner_id=owner,
            key=f"glossary:{uri}:{e.term.lower()}",
            text=e.text(),
            kind="fact",
            scope=scope,
            sources=[("asset", asset.id)],
            provenance={"origin": "bootstrap", "glossary": {"term": e.term, "mapping": e.mapping}},
            job_id=ctx.job_id,
        )
        stats["glossary_terms"] += o != "unchanged"


def _source_url(ctx: JobContext, job: Job, schema_url: str) -> str:
    """Checked again at run time: the allow-list may have changed since the job was queued."""
    from app.jobs.sources import resolve

    return resolve(schema_url, ctx.settings.bootstrap_sources, operator=job.created_by is None)


def _inspect(url: str) -> list:
    """Tables of a database source; a failure says only that the source was refused (details go
    to the log)."""
    from app.jobs.sources import REFUSED, SourceRefused

    try:
        return src.inspect_schema(url)
    except Exception as exc:
        log.warning("bootstrap source %s failed: %s", src.redact_url(url), exc)
        raise SourceRefused(REFUSED) from None


def _precompute_kv(ctx: JobContext, texts: list[str]) -> None:
    """Hook for the inference tier: warm its chunk KV store (best effort, if one is configured)."""
    tier = TierClient.from_settings(ctx.settings)
    if tier is not None:
        with tier:
            tier.precompute(texts)
