"""train_cartridge job: an org's assets -> self-study + context distillation -> a cartridge
record with the most restrictive scope of its assets and `trained_on` lineage.

The cartridge id is the job id and its working folder is stable, so a killed run resumes
(self-study shards and distillation checkpoints are reused). The records, lineage and audit are
the cartridges service's (``app.cartridges.service``); the training is ``trainer.py``'s.

Cancellation: the trainer calls back before every distillation step; at most every
``CHECK_EVERY_S`` that renews the job's lease or raises ``JobCancelled``, and a cancelled run's
folder is removed (nothing is recorded: a cancelled job is never resumed)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from app.cartridges import service as cartridges
from app.jobs.params import TrainCartridgeParams
from app.jobs.runner import JobCancelled, JobContext
from app.orgs.service import job_owner

if TYPE_CHECKING:
    from collections.abc import Callable

    from app.jobs.models import Job

CHECK_EVERY_S = 5.0


def _checker(ctx: JobContext) -> Callable[[], None]:
    """A heartbeat at most every CHECK_EVERY_S (a step can take well under a second on a GPU)."""
    last = [float("-inf")]

    def check() -> None:
        if time.monotonic() - last[0] >= CHECK_EVERY_S:
            ctx.heartbeat()
            last[0] = time.monotonic()

    return check


def run(ctx: JobContext, job: Job) -> dict:
    from pipelines.cartridges.trainer import train_cartridge

    p = TrainCartridgeParams.model_validate(job.params)
    with ctx.tx() as db:
        cartridges.sweep_erased(db, ctx.org_id, ctx.settings.data_dir)
        inputs = cartridges.training_inputs(db, ctx.org_id, p.asset_ids)
        owner = inputs.scope.owner_id or job_owner(db, ctx.org_id, job.created_by)
    out_dir = cartridges.folder(ctx.settings.data_dir, ctx.job_id)
    try:
        path, stats = train_cartridge(
            inputs.texts,
            inputs.content_hashes,
            out_dir,
            p.p,
            p.steps,
            data_dir=ctx.settings.data_dir,
            progress=False,
            check=_checker(ctx),
        )
        with ctx.tx() as db:
            rec = cartridges.record_trained(
                db,
                org_id=ctx.org_id,
                cartridge_id=ctx.job_id,
                actor_id=job.created_by,
                owner_id=owner,
                inputs=inputs,
                path=str(path),
                model_id=stats.get("model_id", ""),
                p=p.p,
                stats=stats,
            )
            ctx.checkpoint(db, progress=1.0, stats=rec.stats)
    except (cartridges.ErasedDuringTraining, JobCancelled):
        cartridges.remove_files(ctx.settings.data_dir, [ctx.job_id])
        raise
    return rec.stats
