"""retention job: delete episodes older than the org's policy (org.settings.retention.episode days),
each with the full deletion cascade (derived memories re-derived or removed); and what an erasure
left on disk if its process stopped before removing it (erased cartridges' folders)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from app.cartridges.service import sweep_erased
from app.episodes import service as episodes
from app.erasure.service import forget_episode
from app.jobs.runner import JobContext
from app.kit.items import EPISODE
from app.kit.tenancy.view import EVERY_BRANCH
from app.orgs import service as orgs

if TYPE_CHECKING:
    from app.jobs.models import Job


def run(ctx: JobContext, job: Job) -> dict:
    ctx.view = EVERY_BRANCH  # a deletion reaches every branch, as erasure does (app/kit/tenancy/view.py)
    stats = {"episodes_removed": 0, "memories_removed": 0, "memories_quarantined": 0, "vocabulary_words_removed": 0, "days": None}
    with ctx.tx() as db:
        stats["cartridge_folders_removed"] = sweep_erased(db, ctx.org_id, ctx.settings.data_dir)
        days = orgs.retention_days(db, ctx.org_id, EPISODE)
    if not days:
        return stats
    stats["days"] = days
    cutoff = orgs.retention_cutoff(days, datetime.now(UTC))
    while True:
        with ctx.tx() as db:  # small batches: each commits with its checkpoint
            ids = episodes.ids_before(db, ctx.org_id, cutoff, 50)
            for eid in ids:
                s = forget_episode(db, org_id=ctx.org_id, episode_id=eid, actor_id=None, job_id=ctx.job_id)
                for k in ("episodes_removed", "memories_removed", "memories_quarantined", "vocabulary_words_removed"):
                    stats[k] += s[k]
            ctx.checkpoint(db, progress=0.5 if ids else 1.0, stats=stats)
        if not ids:
            return stats
