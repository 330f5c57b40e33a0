"""distill job: episodes since the watermark -> prepared once (``steps.EpisodeText``) -> judged ->
grouped by scope and owner -> extracted memories citing their episodes -> compared with the
nearest memory of their scope and decided by the memory manager (``app.manager``: stored as new,
merged into that memory, superseding it, or dropped; the rules of ``app.memories.near_duplicates``
unless the org has an active learned policy) -> inserted with lineage, the decision recorded.

Crash safety: the LLM work for a batch happens outside any transaction; the writes for the
batch, the org's watermark and the job checkpoint then commit together, after checking (under
a row lock) that the watermark has not moved. A killed worker therefore loses at most the
uncommitted batch, which the next run redoes: no duplicate, no missing memory.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from app.audit.service import record
from app.embedders import service as embedders
from app.episodes import service as episodes
from app.jobs import service as jobs
from app.jobs.params import DistillParams
from app.jobs.runner import JobContext
from app.kit.tenancy import scope as scopes
from app.manager import service as manager
from app.manager.features import DISTILL, Candidate, Neighbour
from app.manager.policy import DROP, MERGE, NEW, RULES, SUPERSEDE
from app.memories import lifecycle, near_duplicates, versioning
from pipelines.consolidation.rules import contradicts
from pipelines.distillation.extraction import Extracted, extract
from pipelines.distillation.judging import judge
from pipelines.distillation.steps import EpisodeText, StepStats

if TYPE_CHECKING:
    import numpy as np
    from sqlalchemy.orm import Session

    from app.episodes.models import Episode
    from app.jobs.models import Job


def _scope_key(e: Episode) -> tuple:
    # Never one memory across owners: the owner is part of the key even for shared episodes.
    return (e.owner_id, e.visibility, tuple(sorted(e.groups)), tuple(sorted(e.labels)))


def run(ctx: JobContext, job: Job) -> dict:
    p = DistillParams.model_validate(job.params)
    gateway = ctx.resources.gateway
    steps = StepStats()
    stats = {"seen": 0, "kept": 0, "skipped": 0, "quarantined": 0, "memories_created": 0, "merged_into_existing": 0}
    if job.cursor.get("position"):  # resumed after a crash: keep counting from the last checkpoint
        stats.update({k: v for k, v in job.stats.items() if k in stats or k == "dropped_by_manager"})
    cutoff = datetime.now(UTC) - timedelta(seconds=p.min_age_s)
    with ctx.tx() as db:
        start = dict(jobs.lock_cursor(db, ctx.org_id, "distill").position)
        policy = manager.policy_for(db, ctx.org_id)
        embedder = ctx.resources.embedder_for(db, ctx.org_id)  # the org's model
        total = stats["seen"] + episodes.count_after(db, ctx.org_id, start, cutoff)
    if p.max_episodes:
        total = min(total, p.max_episodes)
    while stats["seen"] < total:
        # 1. Read the next batch (short transaction), think outside any transaction.
        with ctx.tx() as db:
            position = dict(jobs.lock_cursor(db, ctx.org_id, "distill").position)
            batch = episodes.batch_after(db, ctx.org_id, position, cutoff, min(p.batch_size, total - stats["seen"]))
            db.expunge_all()
        if not batch:
            break
        prepared = [EpisodeText(e.id, e.kind, e.content, e.outcome) for e in batch]  # screened once, for every step
        verdicts = judge(gateway, prepared, stats=steps)
        by_id = {e.id: e for e in batch}
        groups: dict[tuple, list[EpisodeText]] = {}
        for e, ep, v in zip(batch, prepared, verdicts):
            if v.useful:
                groups.setdefault(_scope_key(e), []).append(ep)
        extracted = [x for eps in groups.values() for x in extract(gateway, eps, stats=steps)]
        texts = [x.text for x in extracted]
        vectors = embedder.embed(texts) if texts else []
        # 2. Write the batch, the watermark and the checkpoint atomically.
        with ctx.tx() as db:
            cursor = jobs.lock_cursor(db, ctx.org_id, "distill")
            embedder, vectors = embedders.recheck(db, ctx.org_id, embedder, texts, vectors)  # a switch meanwhile
            if cursor.position != position:  # another run took this batch meanwhile
                continue
            for e, v in zip(batch, verdicts):
                quality = "quarantined" if v.suspicious else ("useful" if v.useful else "skipped")
                episodes.set_quality(db, ctx.org_id, e.id, quality)
                stats["kept" if v.useful else ("quarantined" if v.suspicious else "skipped")] += 1
            for x, vec in zip(extracted, vectors):
                _store(ctx, db, x, vec, [by_id[i] for i in x.source_ids if i in by_id], stats, policy=policy)
            last = batch[-1]
            new_pos = {"at": last.created_at.isoformat(), "id": str(last.id)}
            cursor.position, cursor.updated_at = new_pos, datetime.now(UTC)
            stats["seen"] += len(batch)
            ctx.checkpoint(
                db, progress=stats["seen"] / max(1, total), stats={**stats, **steps.as_dict()}, cursor={"position": new_pos}
            )
    return {**stats, **steps.as_dict()}


def _store(
    ctx: JobContext, db: Session, x: Extracted, vec: np.ndarray, sources: list[Episode], stats: dict, *, policy=RULES
) -> None:
    """Write one extracted memory, confirm the scope's memory it repeats, supersede it, or drop
    the statement: the memory manager's decision (app/manager/, the rules unless the org has an
    active learned policy), recorded with its features. ``sources``: the cited episodes of the
    batch, all of one owner (a scope group never mixes owners)."""
    if not sources:
        return
    owner = sources[0].owner_id
    derived = scopes.derive([scopes.of(s) for s in sources])
    refs = [("episode", s.id) for s in sources]
    near = lifecycle.nearest_in_scope(db, ctx.org_id, owner, derived, vec, x.text)
    decision = manager.decide(policy, _candidate(ctx, db, x, near, sources, derived))
    action = decision[0] if near is not None or decision[0] in (NEW, DROP) else NEW
    done = None
    if action == DROP:
        stats["dropped_by_manager"] = stats.get("dropped_by_manager", 0) + 1
    elif action == MERGE:
        versioning.confirm(db, near[0], sources=refs, job_id=ctx.job_id)
        stats["merged_into_existing"] += 1
        done = near[0].id
    else:
        done = _create(ctx, db, x, vec, sources, derived, stats=stats).id
        if action == SUPERSEDE:
            versioning.resolve(
                db,
                org_id=ctx.org_id,
                winner_id=done,
                loser_id=near[0].id,
                relation="supersedes",
                job_id=ctx.job_id,
                now=datetime.now(UTC),
            )
    manager.record_decision(
        db,
        org_id=ctx.org_id,
        decision=(action, *decision[1:]),
        policy=policy,
        memory_id=done,
        neighbour_id=near[0].id if near is not None else None,
        source=sources[0].session_id or str(sources[0].id),
        owner_id=owner,
        job_id=ctx.job_id,
    )


def _candidate(ctx: JobContext, db: Session, x: Extracted, near, sources: list[Episode], derived) -> Candidate:
    """What the manager knows of an extracted statement: its nearest memory of the scope (the
    only neighbour this job reads) with that memory's utility."""
    nbs: tuple[Neighbour, ...] = ()
    if near is not None:
        m, distance = near
        utility = manager.neighbour_utilities(db, ctx.org_id, [m.id]).get(str(m.id))
        nbs = (Neighbour(m.id, m.text, 1.0 - float(distance), 0, utility, m.recorded_at),)
    return Candidate(
        stage=DISTILL,
        text=x.text,
        kind=x.kind,
        visibility=derived.visibility,
        confidence=float(x.confidence),
        n_sources=len(sources),
        recorded_at=max(s.occurred_at for s in sources),
        repeats=near is not None and near_duplicates.repeats_stored(near[0].text, near[1], x.text),
        conflicts=near is not None and contradicts(near[0].text, x.text),
        neighbours=nbs,
    )


def _create(ctx: JobContext, db: Session, x: Extracted, vec: np.ndarray, sources: list[Episode], derived, *, stats: dict):
    owner = sources[0].owner_id
    refs = [("episode", s.id) for s in sources]
    m = versioning.create_derived(
        db,
        org_id=ctx.org_id,
        owner_id=owner,
        text=x.text,
        kind=x.kind,
        confidence=float(x.confidence),
        provenance={
            "origin": "distill",
            "method": x.method,
            "job_id": str(ctx.job_id),
            "sources": [
                {"type": "episode", "id": str(s.id), **({"turns": x.turns[s.id]} if x.turns.get(s.id) else {})} for s in sources
            ],
        },
        scope=derived,
        embedding=vec,
        valid_from=min(s.occurred_at for s in sources),
        now=datetime.now(UTC),
        sources=refs,
        job_id=ctx.job_id,
    )
    record(
        db,
        org_id=ctx.org_id,
        actor_id=None,
        action="memory.distill",
        target_type="memory",
        target_id=m.id,
        details={"job_id": str(ctx.job_id), "sources": [str(s.id) for s in sources], "kind": x.kind},
    )
    stats["memories_created"] += 1
    return m
