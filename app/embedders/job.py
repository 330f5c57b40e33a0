"""The `reembed` job: move one org's vectors to another embedding model while it is served.

Batches of rows without a staged vector are embedded with the new model and committed one at a
time with the job's checkpoint, so a run killed at any point (kill -9 included) loses at most the
batch it was embedding, and the next run goes on from what was staged. Rows written during the
run have no staged vector and are found by the next pass; once a pass finds (next to) nothing,
the switch (app/embedders/service.py) moves every vector in one transaction, taking the org's
exclusive lock only for what changed while it copied; when it gives way to a writer it is tried
again in a new transaction, the last time with the lock taken first. Searches keep the old
vectors and the old query model until that commit."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from app.embedders import service
from app.kit.tenancy.view import EVERY_BRANCH

if TYPE_CHECKING:
    from app.jobs.models import Job

MAX_PASSES = 3  # under a steady stream of writes, the switch embeds what the last pass left
SWITCH_TRIES = 3  # the switch gives way to a writer at most twice; the last try locks first


def run(ctx, job: Job) -> dict:
    """`ctx`: the runner's JobContext (app/jobs/runner.py); `job.params`: ReembedParams, validated
    when the job was created."""
    ctx.view = EVERY_BRANCH  # every branch's rows and every memory version hold a vector
    model = job.params["model"]
    service.check_dimension(model, service.dimension_of(model, ctx.settings))
    embedder = ctx.resources.embedders.get(model)
    service.check_dimension(model, embedder.dim)
    stats = {"model": model, "staged": 0, "passes": 0}
    with ctx.tx() as db:
        if not service.begin(db, ctx.org_id, model, embedder.dim, ctx.job_id):
            ctx.checkpoint(db, progress=1.0, stats={**stats, "switched": False})
            return {**stats, "switched": False}
        ctx.checkpoint(db, progress=0.0, stats=stats)
    while stats["passes"] < MAX_PASSES:
        stats["passes"] += 1
        cursor: dict = {}
        staged_in_pass = 0
        while cursor.get("item") != "end":
            with ctx.tx() as db:
                n = service.stage_batch(db, ctx.org_id, embedder, cursor)
                staged_in_pass += n
                stats["staged"] += n
                done, total, _ = service.run_state(db, ctx.org_id)
                ctx.checkpoint(db, progress=0.99 * done / max(total, 1), stats={**stats, "done": done, "total": total})
        if staged_in_pass == 0:
            break
    for attempt in range(SWITCH_TRIES):
        try:
            with ctx.tx() as db:
                out = service.switch(db, ctx.org_id, embedder, online=attempt < SWITCH_TRIES - 1)
                stats.update(out, switch_tries=attempt + 1)
                ctx.checkpoint(db, progress=1.0, stats=stats)
            break
        except service.SwitchBusy:
            time.sleep(0.5 * (attempt + 1))  # let the writer it gave way to commit
    return stats
