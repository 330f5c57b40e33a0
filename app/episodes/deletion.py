"""Deleting an episode reaches everything derived from it (DESIGN.md §4), whoever deletes it.

The episode row is removed (content gone, not flagged). A memory derived from it is handled as a
whole (every version of its root): derived only from removed sources, it is removed; with other
sources still alive, its current version is quarantined (hidden from every read path) until
distillation re-derives it without the removed source. So is what was derived from those
memories in turn, transitively (app/memories/cascade.py). Stored Idempotency-Key replies that name
the episode are dropped, so a replay cannot hand its content back. Words of the org's vocabulary
(app/search/lexicon.py) that no row holds once it is gone are removed.

The cascade runs with the row-level-security scope widened to the whole org (`every_scope`): the
caller may delete an org episode that other users derived private memories from, and those must
be reached although the caller cannot see them. Nothing reached this way is returned to the
caller: the job stats count only the memories the caller (`viewer`) may see, the audit event
lists the ids of all of them.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.episodes import repository as episodes_repo
from app.kit.db import every_scope, view_of
from app.kit.repository_view import add_mask
from app.memories import lifecycle
from app.orgs import idempotency
from app.search import lexicon


def forget_episode(db: Session, *, org_id: uuid.UUID, episode_id: uuid.UUID, actor_id: uuid.UUID | None,
                   job_id: uuid.UUID | None, viewer: Principal | None = None) -> dict:
    """In main the episode is erased everywhere (every branch's memories derived from it too). In
    a branch (app/kit/view.py) only the branch changes: its own rows go, main's are masked.
    `viewer`: who asked (None: a system job), whose counts the stats hold (`Reached.seen_by`)."""
    branch = view_of(db).branch_id
    with every_scope(db):
        roots = lifecycle.roots_derived_from(db, org_id, "episode", [episode_id])
        held = lexicon.lexemes_of(db, org_id, episode_id)
        episodes_repo.hard_delete(db, org_id, episode_id, branch=branch)
        if branch is not None:
            add_mask(db, org_id=org_id, branch_id=branch, item_type="episodes", key=episode_id,
                     at=datetime.now(timezone.utc))
        replies = idempotency.forget_replies(db, org_id, [episode_id]) if branch is None else 0
        db.flush()
        reached = lifecycle.remove_or_quarantine(db, org_id, roots, removed_source=episode_id)
        # Its words leave the org's vocabulary once no row holds them (a masked main row still does).
        words = lexicon.forget_unheld(db, org_id, held)
    seen_removed, seen_quarantined = reached.seen_by(viewer)
    stats = {"episodes_removed": 1, "memories_removed": seen_removed, "memories_quarantined": seen_quarantined,
             "idempotency_replies_removed": replies, "vocabulary_words_removed": words}
    record(db, org_id=org_id, actor_id=actor_id, action="episode.delete", target_type="episode",
           target_id=episode_id, details={**stats, "memories_removed": len(reached.removed),
                                          "memories_quarantined": len(reached.quarantined),
                                          "job_id": str(job_id) if job_id else None,
                                          "memory_ids": [str(i) for i in reached.removed + reached.quarantined],
                                          **reached.audit()})
    return stats
