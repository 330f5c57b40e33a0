"""Right to be forgotten: DELETE /v1/users/{id}/data removes everything a user owns and what was
derived from it (the deletion cascade, app/memories/cascade.py: from their episodes, memories,
assets and chunks, transitively, whoever owns the derived memories and in every branch), revokes
their keys, and records it in the audit log. The job's counts of derived memories cover only what
the caller may see (admins: all); the `user.forget` event lists the ids of all of them.

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
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from app.audit.service import record
from app.auth.principal import Principal
from app.cartridges import service as cartridges
from app.episodes import service as episodes
from app.episodes.deletion import forget_episode
from app.jobs import service as jobs
from app.kit.db import bind_principal, transaction
from app.kit.view import EVERY_BRANCH
from app.kit.errors import NotFound
from app.kit.tier import TierClient
from app.knowledge import service as knowledge
from app.lineage import service as lineage
from app.memories import lifecycle
from app.orgs import idempotency
from app.orgs import repository as repo
from app.sessions import service as sessions


def forget_user(db: Session, *, org_id: uuid.UUID, user_id: uuid.UUID, actor_id: uuid.UUID,
                job_id: uuid.UUID | None, viewer: Principal | None = None) -> tuple[dict, "Leftovers"]:
    """Delete everything the user owns; returns (stats, what to remove after the commit). `viewer`:
    who asked, whose counts the stats hold (None: every one)."""
    # An admin action over every scope and every branch: erasure reaches them all.
    bind_principal(db, None, org_id=org_id, all_scopes=True, view=EVERY_BRANCH)
    stats = {"episodes_removed": 0, "memories_removed": 0, "memories_quarantined": 0, "sessions_removed": 0,
             "assets_removed": 0, "retrievals_removed": 0, "keys_revoked": 0, "idempotency_replies_removed": 0,
             "vocabulary_words_removed": 0}
    for eid in episodes.ids_owned_by(db, org_id, user_id):
        s = forget_episode(db, org_id=org_id, episode_id=eid, actor_id=actor_id, job_id=job_id, viewer=viewer)
        for k in ("episodes_removed", "memories_removed", "memories_quarantined", "idempotency_replies_removed",
                  "vocabulary_words_removed"):
            stats[k] += s[k]
    reached = lifecycle.delete_owned_by(db, org_id, user_id)
    stats["sessions_removed"] = sessions.delete_owned_by(db, org_id, user_id)
    assets = knowledge.forget_owner(db, org_id, user_id)
    reached.add(assets["derived"])
    seen_removed, seen_quarantined = reached.seen_by(viewer)
    stats["memories_removed"] += seen_removed
    stats["memories_quarantined"] += seen_quarantined
    stats["cartridges_erased"], stats["assets_removed"] = assets["cartridges_erased"], assets["assets_removed"]
    stats["retrievals_removed"] = lineage.forget_retrievals_by(db, org_id, user_id)
    stats["idempotency_replies_removed"] += idempotency.forget_user_replies(db, org_id, user_id)
    stats["keys_revoked"] = repo.revoke_keys(db, org_id, user_id, datetime.now(timezone.utc))
    record(db, org_id=org_id, actor_id=actor_id, action="user.forget", target_type="user", target_id=user_id,
           details={**stats, "job_id": str(job_id) if job_id else None, "asset_hashes": assets["asset_hashes"],
                    **reached.audit()})
    return stats, Leftovers(assets["chunk_hashes"], assets["cartridge_ids"])


@dataclass(frozen=True)
class Leftovers:
    """What an erasure must reach outside the database once it has committed."""

    chunk_hashes: list[str]
    cartridge_ids: list[uuid.UUID]


def start(db: Session, principal: Principal, user_id: uuid.UUID) -> tuple[uuid.UUID, dict, Leftovers]:
    """Admins for anyone in their org, any user for themselves (else 404). Deletes in the caller's
    transaction; returns (job id, stats so far, what `drop_derived_state` removes after the commit)."""
    target = repo.user_in_org(db, principal.org_id, user_id)
    if target is None or (user_id != principal.user_id and not principal.has_role("admin")):
        raise NotFound("user not found")
    job = jobs.create(db, org_id=principal.org_id, actor_id=principal.user_id, kind="forget_user",
                      params={"user_id": str(user_id)}, status="running")
    stats, leftovers = forget_user(db, org_id=principal.org_id, user_id=user_id, actor_id=principal.user_id,
                                   job_id=job.id, viewer=principal)
    bind_principal(db, principal)  # back to the caller's own scope for the rest of the request
    job.stats = stats
    return job.id, stats, leftovers


def drop_derived_state(sessions_: sessionmaker[Session], org_id: uuid.UUID, job_id: uuid.UUID, stats: dict,
                       leftovers: Leftovers, data_dir: Path, tier: TierClient | None) -> None:
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
        jobs.finish(db, jobs.get_for_update(db, org_id, job_id),
                    stats={**stats, "chunk_kv_deleted": dropped, "cartridge_folders_removed": folders,
                           "tier_cartridges_dropped": tier_carts})


def tier_client(settings) -> TierClient | None:  # noqa: ANN001
    """The inference tier to reach with the deletion (None when none is configured)."""
    return TierClient.from_settings(settings)
