"""consolidate job: merge near-duplicates, resolve conflicts, prune the stale, re-validate
schema hints. Works within one scope at a time (same owner, visibility, groups, labels), so a
merge never widens or mixes access. Losers are superseded (kept as history), never erased.
Each scope group commits with its checkpoint; a re-run finds nothing left to do.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
from sqlalchemy import select

from app.audit.service import record
from app.jobs.models import Job
from app.jobs.params import ConsolidateParams
from app.jobs.runner import JobContext
from app.knowledge.models import KnowledgeAsset
from app.lineage.models import LineageEdge
from app.lineage.service import add_edge
from app.memories import repository as memories_repo
from app.memories import repository_pipeline as repo
from app.memories.models import Memory
from pipelines.consolidation.rules import Item, clusters, contradicts, winner


def _key(m: Memory) -> tuple:
    return (m.owner_id, m.visibility, tuple(sorted(m.groups)), tuple(sorted(m.labels)), m.kind == "schema_hint")


def run(ctx: JobContext, job: Job) -> dict:
    p = ConsolidateParams.model_validate(job.params)
    stats = {"seen": 0, "merged": 0, "superseded": 0, "pruned": 0, "quarantined": 0, "restored": 0}
    with ctx.tx() as db:
        mems = repo.active_memories(db, ctx.org_id)
        edges = db.execute(select(LineageEdge.from_id, LineageEdge.to_type, LineageEdge.to_id).where(
            LineageEdge.org_id == ctx.org_id, LineageEdge.relation == "distilled_from")).all()
        db.expunge_all()
    sources: dict = {}
    for from_id, to_type, to_id in edges:
        sources.setdefault(from_id, []).append((to_type, to_id))
    stats["seen"] = len(mems)
    groups: dict[tuple, list[Memory]] = {}
    for m in mems:
        if m.status == "active":
            groups.setdefault(_key(m), []).append(m)
    now = datetime.now(timezone.utc)
    for gi, group in enumerate(groups.values()):
        items = [Item(m.id, m.text, np.asarray(m.embedding, dtype=np.float32), m.confidence, m.recorded_at,
                      len(sources.get(m.id, []))) for m in group]
        decisions: list[tuple[str, Item, Item]] = []  # (relation, winner, loser)
        dup_ids = set()
        for comp in clusters(items, p.duplicate_threshold):
            members = [items[i] for i in comp]
            w = winner(members)
            for loser in members:
                if loser is not w:
                    # Near-identical wording can still disagree ("on Monday" / "on Wednesday").
                    decisions.append(("supersedes" if contradicts(w.text, loser.text) else "merged_from", w, loser))
                    dup_ids.add(loser.id)
        rest = [i for i in items if i.id not in dup_ids]
        for comp in clusters(rest, p.conflict_threshold):
            members = [rest[i] for i in comp]
            for a_i, a in enumerate(members):
                for b in members[a_i + 1:]:
                    if a.id in dup_ids or b.id in dup_ids or not contradicts(a.text, b.text):
                        continue
                    w = winner([a, b])
                    loser = b if w is a else a
                    decisions.append(("supersedes", w, loser))
                    dup_ids.add(loser.id)
        if not decisions:
            continue
        with ctx.tx() as db:
            for relation, w, loser in decisions:
                row = db.execute(select(Memory).where(Memory.id == loser.id, Memory.status == "active")
                                 .with_for_update()).scalar_one_or_none()
                if row is None:
                    continue
                row.status, row.superseded_at = "superseded", now
                if relation == "supersedes":
                    row.valid_to = now
                add_edge(db, org_id=ctx.org_id, from_type="memory", from_id=w.id, to_type="memory", to_id=loser.id,
                         relation=relation, job_id=ctx.job_id)
                stats["merged" if relation == "merged_from" else "superseded"] += 1
                record(db, org_id=ctx.org_id, actor_id=None, action=f"memory.{'merge' if relation == 'merged_from' else 'supersede'}",
                       target_type="memory", target_id=loser.id, details={"winner": str(w.id), "job_id": str(ctx.job_id)})
            ctx.checkpoint(db, progress=0.8 * (gi + 1) / len(groups), stats=stats)
    with ctx.tx() as db:
        _prune(ctx, db, p, sources, now, stats)
        _revalidate_hints(ctx, db, stats)
        ctx.checkpoint(db, progress=1.0, stats=stats)
    return stats


def _prune(ctx: JobContext, db, p: ConsolidateParams, sources: dict, now, stats: dict) -> None:  # noqa: ANN001
    for m in repo.active_memories(db, ctx.org_id):
        srcs = sources.get(m.id, [])
        if srcs and m.provenance.get("origin") == "distill":
            alive = sum(1 for t, i in srcs if db.execute(select(memories_repo.SOURCE_MODELS[t].id)
                                                         .where(memories_repo.SOURCE_MODELS[t].id == i)).first())
            if alive == 0:  # every source is gone: the memory goes too (content included)
                memories_repo.delete_root(db, ctx.org_id, m.root_id)
                record(db, org_id=ctx.org_id, actor_id=None, action="memory.prune", target_type="memory",
                       target_id=m.id, details={"reason": "all sources deleted", "job_id": str(ctx.job_id)})
                stats["pruned"] += 1
                continue
        if p.ttl_days and m.status == "active" and m.last_validated_at < now - timedelta(days=p.ttl_days):
            m.status, m.superseded_at, m.valid_to = "superseded", now, now
            record(db, org_id=ctx.org_id, actor_id=None, action="memory.expire", target_type="memory", target_id=m.id,
                   details={"reason": f"not validated for {p.ttl_days} days", "job_id": str(ctx.job_id)})
            stats["pruned"] += 1


def _revalidate_hints(ctx: JobContext, db, stats: dict) -> None:  # noqa: ANN001
    """Hints naming a dropped table, or columns it no longer has, are quarantined (and restored
    if the table comes back)."""
    assets = db.execute(select(KnowledgeAsset).where(KnowledgeAsset.org_id == ctx.org_id,
                                                     KnowledgeAsset.kind == "table_schema",
                                                     KnowledgeAsset.status == "active")).scalars()
    live = {a.metadata_.get("table"): set(a.metadata_.get("columns", [])) for a in assets}
    hints = db.execute(select(Memory).where(Memory.org_id == ctx.org_id, Memory.kind == "schema_hint",
                                            Memory.status.in_(("active", "quarantined")))).scalars()
    for h in hints:
        schema = h.provenance.get("schema") or {}
        table = schema.get("table")
        if not table:
            continue
        ok = table in live and set(schema.get("columns", [])) <= live[table]
        if not ok and h.status == "active":
            h.status = "quarantined"
            stats["quarantined"] += 1
            record(db, org_id=ctx.org_id, actor_id=None, action="memory.quarantine", target_type="memory",
                   target_id=h.id, details={"reason": f"table {table} changed or dropped", "job_id": str(ctx.job_id)})
        elif ok and h.status == "quarantined" and not h.provenance.get("pending_rederive"):
            h.status = "active"
            stats["restored"] += 1
