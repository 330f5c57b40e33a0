"""Erasure: deleting an episode, and a user's right to be forgotten. One package above the domains:
it calls the services of every domain that holds something of the erased data, and none of them
imports it.

Deleting an episode reaches everything derived from it (DESIGN.md §4), whoever deletes it. The
episode row is removed (content gone, not flagged). A memory derived from it is handled as a
whole (every version of its root): derived only from removed sources, it is removed; with other
sources still alive, its current version is quarantined (hidden from every read path) until
distillation re-derives it without the removed source. So is what was derived from those
memories in turn, transitively (the deletion cascade, app/memories/cascade.py). Stored
Idempotency-Key replies that name the episode are dropped, so a replay cannot hand its content
back. Words of the org's vocabulary (app/search/lexicon.py) that no row holds once it is gone are
removed.

The cascade runs with the row-level-security scope widened to the whole org (`every_scope`): the
caller may delete an org episode that other users derived private memories from, and those must
be reached although the caller cannot see them. Nothing reached this way is returned to the
caller: the job stats count only the memories the caller (`viewer`) may see, the audit event
lists the ids of all of them.

Right to be forgotten: DELETE /v1/users/{id}/data removes everything a user owns and what was
derived from it (the same cascade from their episodes, memories, assets and chunks, whoever owns
the derived memories and in every branch), revokes their keys, and records it in the audit log.

Two steps, so that no network call and no file removal happens inside the transaction:
`forget_user` deletes in the request's transaction and returns what lives outside the database
(the content hashes of the removed chunks, the ids of the cartridges trained on the removed
assets); after the commit, `drop_derived_state` removes those cartridges' folders, asks the
inference tier to drop the chunks' KV and the cartridges it may hold in memory (best effort: a
tier that is down never fails the erasure; its KV is a cache of computable state, and a cartridge
it can no longer read from disk it can no longer load), and finishes the job with the counts.
A process stopped between the two leaves erased cartridges' folders: every retention and
train_cartridge job removes those (`cartridges.sweep_erased`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from app.audit.service import record
from app.auth.principal import Principal
from app.cartridges import service as cartridges
from app.episodes import service as episodes
from app.feedback import service as feedback
from app.jobs import service as jobs
from app.kit.database.db import bind_principal, every_scope, transaction, view_of
from app.kit.errors import NotFound
from app.kit.http import idempotency
from app.kit.runtime.tier import TierClient
from app.kit.tenancy.access import assert_may_modify
from app.kit.tenancy.repository_view import add_mask
from app.kit.tenancy.view import EVERY_BRANCH
from app.knowledge import service as knowledge
from app.lineage import service as lineage
from app.manager import service as manager
from app.memories import lifecycle
from app.orgs import service as orgs
from app.search import lexicon
from app.sessions import service as sessions


def delete_episode(db: Session, principal: Principal, episode_id: uuid.UUID) -> uuid.UUID:
    """DELETE of an episode the caller may modify, and of everything derived from it, as a job record
    (finished when this returns: the cascade is cheap, ids and lineage, so when the 202 arrives the
    content is already gone; re-derivation of quarantined memories is queued work). Returns the job id."""
    assert_may_modify(principal, episodes.get(db, principal, episode_id), "episode")
    job = jobs.run_now(
        db,
        principal,
        kind="delete_episode",
        params={"episode_id": str(episode_id)},
        work=lambda job_id: forget_episode(
            db, org_id=principal.org_id, episode_id=episode_id, actor_id=principal.user_id, job_id=job_id, viewer=principal
        ),
    )
    return job.id


def forget_episode(
    db: Session,
    *,
    org_id: uuid.UUID,
    episode_id: uuid.UUID,
    actor_id: uuid.UUID | None,
    job_id: uuid.UUID | None,
    viewer: Principal | None = None,
) -> dict:
    """In main the episode is erased everywhere (every branch's memories derived from it too). In
    a branch (app/kit/tenancy/view.py) only the branch changes: its own rows go, main's are masked.
    `viewer`: who asked (None: a system job), whose counts the stats hold (`Reached.seen_by`)."""
    branch = view_of(db).branch_id
    with every_scope(db):
        roots = lifecycle.roots_derived_from(db, org_id, "episode", [episode_id])
        held = lexicon.lexemes_of(db, org_id, episode_id)
        episodes.hard_delete(db, org_id, episode_id, branch=branch)
        if branch is not None:
            add_mask(db, org_id=org_id, branch_id=branch, item_type="episodes", key=episode_id, at=datetime.now(UTC))
        replies = idempotency.forget_replies(db, org_id, [episode_id]) if branch is None else 0
        db.flush()
        reached = lifecycle.remove_or_quarantine(db, org_id, roots, removed_source=episode_id)
        # Its words leave the org's vocabulary once no row holds them (a masked main row still does).
        words = lexicon.forget_unheld(db, org_id, held)
    seen_removed, seen_quarantined = reached.seen_by(viewer)
    stats = {
        "episodes_removed": 1,
        "memories_removed": seen_removed,
        "memories_quarantined": seen_quarantined,
        "idempotency_replies_removed": replies,
        "vocabulary_words_removed": words,
    }
    record(
        db,
        org_id=org_id,
        actor_id=actor_id,
        action="episode.delete",
        target_type="episode",
        target_id=episode_id,
        details={
            **stats,
            "memories_removed": len(reached.removed),
            "memories_quarantined": len(reached.quarantined),
            "job_id": str(job_id) if job_id else None,
            "memory_ids": [str(i) for i in reached.removed + reached.quarantined],
            **reached.audit(),
        },
    )
    return stats


def forget_user(
    db: Session,
    *,
    org_id: uuid.UUID,
    user_id: uuid.UUID,
    actor_id: uuid.UUID,
    job_id: uuid.UUID | None,
    viewer: Principal | None = None,
) -> tuple[dict, Leftovers]:
    """Delete everything the user owns; returns (stats, what to remove after the commit). `viewer`:
    who asked, whose counts the stats hold (None: every one)."""
    # An admin action over every scope and every branch: erasure reaches them all.
    bind_principal(db, None, org_id=org_id, all_scopes=True, view=EVERY_BRANCH)
    stats = {
        "episodes_removed": 0,
        "memories_removed": 0,
        "memories_quarantined": 0,
        "sessions_removed": 0,
        "assets_removed": 0,
        "retrievals_removed": 0,
        "keys_revoked": 0,
        "idempotency_replies_removed": 0,
        "vocabulary_words_removed": 0,
    }
    for eid in episodes.ids_owned_by(db, org_id, user_id):
        s = forget_episode(db, org_id=org_id, episode_id=eid, actor_id=actor_id, job_id=job_id, viewer=viewer)
        for k in (
            "episodes_removed",
            "memories_removed",
            "memories_quarantined",
            "idempotency_replies_removed",
            "vocabulary_words_removed",
        ):
            stats[k] += s[k]
    reached = lifecycle.delete_owned_by(db, org_id, user_id)
    stats["sessions_removed"] = sessions.delete_owned_by(db, org_id, user_id)
    assets = knowledge.forget_owner(db, org_id, user_id)
    reached.add(assets["derived"])
    seen_removed, seen_quarantined = reached.seen_by(viewer)
    stats["memories_removed"] += seen_removed
    stats["memories_quarantined"] += seen_quarantined
    stats["cartridges_erased"], stats["assets_removed"] = assets["cartridges_erased"], assets["assets_removed"]
    stats["feedback_removed"] = feedback.forget_user(db, org_id, user_id)
    stats["manager_decisions_removed"] = manager.forget_user(db, org_id, user_id)
    stats["retrievals_removed"] = lineage.forget_retrievals_by(db, org_id, user_id)
    stats["idempotency_replies_removed"] += idempotency.forget_user_replies(db, org_id, user_id)
    stats["keys_revoked"] = orgs.revoke_keys(db, org_id, user_id, datetime.now(UTC))
    record(
        db,
        org_id=org_id,
        actor_id=actor_id,
        action="user.forget",
        target_type="user",
        target_id=user_id,
        details={**stats, "job_id": str(job_id) if job_id else None, "asset_hashes": assets["asset_hashes"], **reached.audit()},
    )
    return stats, Leftovers(assets["chunk_hashes"], assets["cartridge_ids"])


@dataclass(frozen=True)
class Leftovers:
    """What an erasure must reach outside the database once it has committed."""

    chunk_hashes: list[str]
    cartridge_ids: list[uuid.UUID]


def start_forget_user(db: Session, principal: Principal, user_id: uuid.UUID) -> tuple[uuid.UUID, dict, Leftovers]:
    """Admins for anyone in their org, any user for themselves (else 404). Deletes in the caller's
    transaction; returns (job id, stats so far, what `drop_derived_state` removes after the commit)."""
    target = orgs.user_in_org(db, principal.org_id, user_id)
    if target is None or (user_id != principal.user_id and not principal.has_role("admin")):
        raise NotFound("user not found")
    job = jobs.create(
        db,
        org_id=principal.org_id,
        actor_id=principal.user_id,
        kind="forget_user",
        params={"user_id": str(user_id)},
        status="running",
    )
    stats, leftovers = forget_user(
        db, org_id=principal.org_id, user_id=user_id, actor_id=principal.user_id, job_id=job.id, viewer=principal
    )
    bind_principal(db, principal)  # back to the caller's own scope for the rest of the request
    job.stats = stats
    return job.id, stats, leftovers


def drop_derived_state(
    sessions_: sessionmaker[Session],
    org_id: uuid.UUID,
    job_id: uuid.UUID,
    stats: dict,
    *,
    leftovers: Leftovers,
    data_dir: Path,
    tier: TierClient | None,
) -> None:
    """After the commit: remove the erased cartridges' folders, drop the removed chunks' KV and the
    erased cartridges in the inference tier, then finish the job."""
    try:
        folders = cartridges.remove_files(data_dir, leftovers.cartridge_ids)
        dropped = tier.drop_chunks(leftovers.chunk_hashes) if tier is not None and leftovers.chunk_hashes else 0
        tier_carts = tier.drop_cartridges(leftovers.cartridge_ids) if tier is not None and leftovers.cartridge_ids else 0
    finally:
        if tier is not None:
            tier.close()
    with transaction(sessions_) as db:
        bind_principal(db, None, org_id=org_id, all_scopes=True)
        jobs.finish(
            db,
            jobs.get_for_update(db, org_id, job_id),
            stats={
                **stats,
                "chunk_kv_deleted": dropped,
                "cartridge_folders_removed": folders,
                "tier_cartridges_dropped": tier_carts,
            },
        )


def tier_client(settings) -> TierClient | None:
    """The inference tier to reach with the deletion (None when none is configured)."""
    return TierClient.from_settings(settings)
