"""consolidate job: act on feedback, merge near-duplicates, resolve conflicts, prune the stale,
re-validate schema hints. Which near-duplicate or conflicting memory to merge or supersede is the
memory manager's decision (pipelines/consolidation/decide.py: the rules unless the org has an
active learned policy), recorded with its features. Works within one scope at a time (same owner, visibility, groups,
labels), so a merge never widens or mixes access. Losers are superseded (kept as history), never
erased. Each scope group commits with its checkpoint; a re-run finds nothing left to do.

Feedback first (rules.feedback_review): a memory held for review (enough distinct users marked
it `wrong`, more wrong than helpful: app/feedback/service.py) is quarantined (hidden from every
read path, kept, `provenance.review = "feedback"` so that no automatic rule restores it); one
that enough users marked `outdated` gets a supersede proposal, an audit event and
`provenance.supersede_proposed`, for a steward to act on (nothing else changes).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from app.audit.service import record
from app.feedback import service as feedback
from app.jobs.params import ConsolidateParams
from app.jobs.runner import JobContext
from app.knowledge import service as knowledge
from app.lineage import service as lineage
from app.manager import service as manager
from app.memories import lifecycle, versioning
from pipelines.consolidation.decide import Group, decide_group, source_of
from pipelines.consolidation.rules import OUTDATED_USERS, Item, feedback_review

if TYPE_CHECKING:
    from app.jobs.models import Job
    from app.memories.models import Memory


def _key(m: Memory) -> tuple:
    return (m.owner_id, m.visibility, tuple(sorted(m.groups)), tuple(sorted(m.labels)), m.kind == "schema_hint")


def run(ctx: JobContext, job: Job) -> dict:
    p = ConsolidateParams.model_validate(job.params)
    stats = {
        "seen": 0,
        "merged": 0,
        "superseded": 0,
        "pruned": 0,
        "quarantined": 0,
        "restored": 0,
        "quarantined_by_feedback": 0,
        "supersede_proposed": 0,
    }
    with ctx.tx() as db:
        _review_feedback(ctx, db, stats)
    with ctx.tx() as db:
        mems = lifecycle.live_memories(db, ctx.org_id)
        sources = lineage.sources_by_relation(db, ctx.org_id, "distilled_from")
        policy = manager.policy_for(db, ctx.org_id)
        db.expunge_all()
    stats["seen"] = len(mems)
    groups: dict[tuple, list] = {}
    for m in mems:
        if m.status == "active":
            groups.setdefault(_key(m), []).append(m)
    now = datetime.now(UTC)
    for gi, group in enumerate(groups.values()):
        items = [
            Item(m.id, m.text, np.asarray(m.embedding, dtype=np.float32), m.confidence, m.recorded_at, len(sources.get(m.id, [])))
            for m in group
        ]
        if len(items) < 2:
            continue
        g = Group(items, {m.id: m for m in group}, sources)
        with ctx.tx() as db:
            decisions = decide_group(db, ctx.org_id, g, policy, duplicate=p.duplicate_threshold, conflict=p.conflict_threshold)
            for relation, w, loser, decision in decisions:
                if versioning.resolve(
                    db, org_id=ctx.org_id, winner_id=w.id, loser_id=loser.id, relation=relation, job_id=ctx.job_id, now=now
                ):
                    stats["merged" if relation == "merged_from" else "superseded"] += 1
                    manager.record_decision(
                        db,
                        org_id=ctx.org_id,
                        decision=decision,
                        policy=policy,
                        memory_id=w.id,
                        neighbour_id=w.id,
                        source=source_of(g, loser),
                        owner_id=g.memories[loser.id].owner_id,
                        job_id=ctx.job_id,
                    )
            if decisions:
                ctx.checkpoint(db, progress=0.8 * (gi + 1) / len(groups), stats=stats)
    with ctx.tx() as db:
        _prune(ctx, db, p, sources, now, stats)
        _revalidate_hints(ctx, db, stats)
        ctx.checkpoint(db, progress=1.0, stats=stats)
    return stats


def _prune(ctx: JobContext, db, p: ConsolidateParams, sources: dict, now, stats: dict) -> None:
    live = lifecycle.live_memories(db, ctx.org_id)
    orphans = lifecycle.without_live_sources(db, ctx.org_id, live, sources)
    for m in live:
        if m.id in orphans:  # every source is gone: the memory goes too (content included)
            lifecycle.prune(db, m, reason="all sources deleted", job_id=ctx.job_id)
            stats["pruned"] += 1
            continue
        if p.ttl_days and m.status == "active" and m.last_validated_at < now - timedelta(days=p.ttl_days):
            lifecycle.expire(db, m, now, reason=f"not validated for {p.ttl_days} days", job_id=ctx.job_id)
            stats["pruned"] += 1


def _revalidate_hints(ctx: JobContext, db, stats: dict) -> None:
    """Hints naming a dropped table, or columns it no longer has, are quarantined (and restored
    if the table comes back)."""
    live = knowledge.live_table_columns(db, ctx.org_id)
    for h in lifecycle.live_memories(db, ctx.org_id, kind="schema_hint"):
        schema = h.provenance.get("schema") or {}
        table = schema.get("table")
        if not table:
            continue
        ok = table in live and set(schema.get("columns", [])) <= live[table]
        if not ok and h.status == "active":
            lifecycle.quarantine(db, h, reason=f"table {table} changed or dropped", job_id=ctx.job_id)
            stats["quarantined"] += 1
        elif ok and h.status == "quarantined" and not h.provenance.get("pending_rederive") and not h.provenance.get("review"):
            lifecycle.restore(h)
            stats["restored"] += 1


def _review_feedback(ctx: JobContext, db, stats: dict) -> None:
    """Quarantine what distinct users found wrong; propose a supersede for what they found outdated."""
    wrong = feedback.held_for_review(db, ctx.org_id)
    outdated = feedback.flagged(db, ctx.org_id, "outdated", OUTDATED_USERS)
    if not wrong and not outdated:
        return
    live = {m.id: m for m in lifecycle.live_memories(db, ctx.org_id) if m.id in wrong or m.id in outdated}
    active = {i for i, m in live.items() if m.status == "active"}
    quarantine, propose = feedback_review(wrong, outdated, active)
    for i in quarantine:
        m = live[i]
        m.provenance = {**m.provenance, "review": "feedback"}
        lifecycle.quarantine(db, m, reason=f"marked wrong by {wrong[i]} users", job_id=ctx.job_id)
        stats["quarantined_by_feedback"] += 1
    for i in propose:
        m = live[i]
        if m.provenance.get("supersede_proposed"):
            continue
        m.provenance = {**m.provenance, "supersede_proposed": {"users": outdated[i], "job_id": str(ctx.job_id)}}
        record(
            db,
            org_id=ctx.org_id,
            actor_id=None,
            action="memory.supersede_proposed",
            target_type="memory",
            target_id=i,
            details={"reason": f"marked outdated by {outdated[i]} users", "job_id": str(ctx.job_id)},
        )
        stats["supersede_proposed"] += 1
