"""train_cartridge job: an org's assets -> self-study + context distillation -> a cartridge
record with the most restrictive scope of its assets and `trained_on` lineage.

The cartridge id is the job id and its working folder is stable, so a killed run resumes
(self-study shards and distillation checkpoints are reused)."""

from __future__ import annotations

from sqlalchemy import select

from app.audit.service import record
from app.cartridges.models import CartridgeRecord
from app.jobs.models import Job
from app.jobs.params import TrainCartridgeParams
from app.jobs.runner import JobContext
from app.kit import scope as scopes
from app.knowledge.models import Chunk, KnowledgeAsset
from app.lineage.service import add_edge
from pipelines.owner import job_owner


def run(ctx: JobContext, job: Job) -> dict:
    from pipelines.cartridges.job import train_cartridge

    p = TrainCartridgeParams.model_validate(job.params)
    with ctx.tx() as db:
        q = select(KnowledgeAsset).where(KnowledgeAsset.org_id == ctx.org_id, KnowledgeAsset.status == "active",
                                         KnowledgeAsset.kind == "document")
        if p.asset_ids:
            q = select(KnowledgeAsset).where(KnowledgeAsset.org_id == ctx.org_id, KnowledgeAsset.id.in_(p.asset_ids))
        assets = list(db.execute(q.order_by(KnowledgeAsset.source_uri)).scalars())
        if not assets or (p.asset_ids and len(assets) != len(set(p.asset_ids))):
            raise ValueError("no such assets (or some are missing) to train on")
        scope = scopes.derive([scopes.of(a) for a in assets])  # raises if they cannot share one item
        texts = ["\n\n".join(db.execute(select(Chunk.text).where(Chunk.asset_id == a.id).order_by(Chunk.ord)).scalars())
                 for a in assets]
        owner = scope.owner_id or job_owner(db, ctx.org_id, job.created_by)
        meta = [(a.id, a.content_hash) for a in assets]
    out_dir = ctx.settings.data_dir.resolve() / "cartridges" / str(ctx.job_id)
    path, stats = train_cartridge(texts, [h for _, h in meta], out_dir, p.p, p.steps, data_dir=ctx.settings.data_dir,
                                  progress=False)
    with ctx.tx() as db:
        rec = CartridgeRecord(id=ctx.job_id, org_id=ctx.org_id, owner_id=owner, visibility=scope.visibility,
                              groups=list(scope.groups), labels=list(scope.labels), path=str(path),
                              model_id=stats.get("model_id", ""), p=p.p, asset_ids=[a for a, _ in meta],
                              stats={k: v for k, v in stats.items() if isinstance(v, (int, float, str))})
        db.merge(rec)
        for asset_id, _ in meta:
            add_edge(db, org_id=ctx.org_id, from_type="cartridge", from_id=ctx.job_id, to_type="asset", to_id=asset_id,
                     relation="trained_on", job_id=ctx.job_id)
        record(db, org_id=ctx.org_id, actor_id=job.created_by, action="cartridge.train", target_type="cartridge",
               target_id=ctx.job_id, details={"assets": len(meta), "p": p.p, "visibility": scope.visibility})
        ctx.checkpoint(db, progress=1.0, stats=rec.stats)
    return rec.stats
