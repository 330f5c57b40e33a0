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
from app.kit.scope import Scope
from app.kit.text import sha256
from app.kit.tier import TierClient
from app.knowledge import service as knowledge
from app.knowledge.service import AssetIn, upsert_asset
from app.memories import service as memories
from app.orgs.service import job_owner
from pipelines.bootstrap import sources as src

if TYPE_CHECKING:
    from app.jobs.models import Job

log = logging.getLogger("memscale.bootstrap")


def _resolve(ctx: JobContext, job: "Job", rel: str) -> Path:
    """API jobs may read only under the bootstrap root; operator (CLI) jobs may name any path."""
    root = (ctx.settings.data_dir / "sources").resolve()
    path = Path(rel)
    if job.created_by is None:
        return path.resolve()
    resolved = (root / path).resolve()
    if not resolved.is_relative_to(root):
        raise ValueError("path escapes the bootstrap root")
    return resolved


def _token_counter(ctx: JobContext):  # noqa: ANN202
    emb = ctx.resources.embedder
    tok = getattr(getattr(emb, "_model", None), "tokenizer", None)
    if tok is None:
        return lambda t: int(len(t.split()) * 1.3) + 1
    return lambda t: len(tok.encode(t, add_special_tokens=False))


def run(ctx: JobContext, job: "Job") -> dict:
    p = BootstrapParams.model_validate(job.params)
    scope = Scope(p.visibility, None, tuple(p.groups), tuple(p.labels))
    stats = {"documents": 0, "created": 0, "updated": 0, "unchanged": 0, "chunks": 0, "tables": 0,
             "tables_dropped": 0, "schema_hints": 0, "glossary_terms": 0}
    count = _token_counter(ctx)
    embedder = ctx.resources.embedder
    with ctx.tx() as db:
        owner = job_owner(db, ctx.org_id, job.created_by)
    if p.visibility == "private":
        scope = Scope("private", owner, (), scope.labels)

    work: list[tuple[str, object]] = []
    if p.path:
        work += [("doc", d) for d in src.read_folder(_resolve(ctx, job, p.path))]
    schema_url = _source_url(ctx, job, p.schema_url) if p.schema_url else None
    tables = _inspect(schema_url) if schema_url else []
    work += [("table", t) for t in tables]
    glossary = src.read_glossary(_resolve(ctx, job, p.glossary)) if p.glossary else []
    if glossary:
        work.append(("glossary", glossary))
    new_chunk_texts: list[str] = []

    for i, (what, item) in enumerate(work):
        with ctx.tx() as db:
            if what == "doc":
                stats["documents"] += 1
                chunks = src.chunk_text(item.text, count)
                outcome, _ = upsert_asset(db, embedder, org_id=ctx.org_id, owner_id=owner, scope=scope, count_tokens=count,
                                          item=AssetIn("document", item.uri, item.title, item.content_hash, chunks, {}),
                                          job_id=ctx.job_id)
                stats[outcome] += 1
                if outcome != "unchanged":
                    stats["chunks"] += len(chunks)
                    new_chunk_texts += chunks
            elif what == "table":
                stats["tables"] += 1
                _table(ctx, db, item, schema_url, owner, scope, count, stats)
            else:
                _glossary(ctx, db, item, p.glossary, owner, scope, count, stats)
            ctx.checkpoint(db, progress=(i + 1) / max(1, len(work) + 1), stats=stats)
    if schema_url:
        with ctx.tx() as db:
            prefix = f"schema:{src.redact_url(schema_url)}#"
            present = {f"{prefix}{t.qualified}" for t in tables}
            gone = [a.id for a in knowledge.active_assets(db, ctx.org_id, "table_schema", prefix)
                    if a.source_uri not in present]
            knowledge.set_status(db, gone, "dropped")
            stats["tables_dropped"] = len(gone)
            ctx.checkpoint(db, progress=1.0, stats=stats)
    _precompute_kv(ctx, new_chunk_texts)
    return stats


def _table(ctx, db, t: src.TableInfo, url: str, owner, scope: Scope, count, stats: dict) -> None:  # noqa: ANN001
    text = t.describe()
    uri = f"schema:{src.redact_url(url)}#{t.qualified}"
    meta = {"table": t.qualified, "columns": [c["name"] for c in t.columns]}
    outcome, asset = upsert_asset(db, ctx.resources.embedder, org_id=ctx.org_id, owner_id=owner, scope=scope,
                                  item=AssetIn("table_schema", uri, t.qualified, sha256(text), [text], meta),
                                  count_tokens=count, job_id=ctx.job_id)
    stats[outcome] += 1
    hint_outcome, _ = memories.upsert_derived(
        db, ctx.resources.embedder, org_id=ctx.org_id, owner_id=owner, key=f"schema_hint:{uri}", text=t.hint(),
        kind="schema_hint", scope=scope, sources=[("asset", asset.id)], provenance={"origin": "bootstrap", "schema": meta},
        job_id=ctx.job_id)
    stats["schema_hints"] += hint_outcome != "unchanged"


def _glossary(ctx, db, entries: list[src.GlossaryEntry], rel: str, owner, scope: Scope, count, stats: dict) -> None:  # noqa: ANN001
    lines = [e.text() for e in entries]
    uri = f"glossary:{Path(rel).name}"
    outcome, asset = upsert_asset(db, ctx.resources.embedder, org_id=ctx.org_id, owner_id=owner, scope=scope,
                                  item=AssetIn("glossary", uri, Path(rel).name, sha256("\n".join(lines)), lines,
                                               {"terms": len(lines)}), count_tokens=count, job_id=ctx.job_id)
    stats[outcome] += 1
    for e in entries:
        o, _ = memories.upsert_derived(
            db, ctx.resources.embedder, org_id=ctx.org_id, owner_id=owner, key=f"glossary:{uri}:{e.term.lower()}",
            text=e.text(), kind="fact", scope=scope, sources=[("asset", asset.id)],
            provenance={"origin": "bootstrap", "glossary": {"term": e.term, "mapping": e.mapping}}, job_id=ctx.job_id)
        stats["glossary_terms"] += o != "unchanged"


def _source_url(ctx: JobContext, job: "Job", schema_url: str) -> str:
    """Checked again at run time: the allow-list may have changed since the job was queued."""
    from app.jobs.sources import resolve

    return resolve(schema_url, ctx.settings.bootstrap_sources, operator=job.created_by is None)


def _inspect(url: str) -> list:
    """Tables of a database source; a failure says only that the source was refused (details go
    to the log)."""
    from app.jobs.sources import REFUSED, SourceRefused

    try:
        return src.inspect_schema(url)
    except Exception as exc:  # noqa: BLE001 - the text of a driver error can map the network
        log.warning("bootstrap source %s failed: %s", src.redact_url(url), exc)
        raise SourceRefused(REFUSED) from None


def _precompute_kv(ctx: JobContext, texts: list[str]) -> None:
    """Hook for the inference tier: warm its chunk KV store (best effort, if one is configured)."""
    tier = TierClient.from_settings(ctx.settings)
    if tier is not None:
        with tier:
            tier.precompute(texts)
