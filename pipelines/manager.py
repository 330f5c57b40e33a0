"""train_manager job: fit the org's memory manager on its recorded decisions and their rewards,
store it as a new policy version (active only if it beat the rules on held-out sources), in one
transaction with the job's checkpoint (app/manager/service.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.jobs.params import TrainManagerParams
from app.jobs.runner import JobContext
from app.manager import service as manager

if TYPE_CHECKING:
    from app.jobs.models import Job


def run(ctx: JobContext, job: Job) -> dict:
    TrainManagerParams.model_validate(job.params)
    with ctx.tx() as db:
        stats = manager.train(db, ctx.org_id, actor_id=job.created_by, job_id=ctx.job_id)
        ctx.checkpoint(db, progress=1.0, stats=stats)
    return stats
