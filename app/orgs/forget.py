"""Right to be forgotten: DELETE /v1/users/{id}/data removes everything a user owns and what was
derived from it (episode cascade), revokes their keys, and records it in the audit log."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from app.audit.service import record
from app.cartridges.service import mark_stale
from app.episodes.deletion import forget_episode
from app.episodes.models import Episode
from app.kit import idempotency
from app.kit.db import bind_principal
from app.kit.tier import TierClient
from app.knowledge.models import Chunk, KnowledgeAsset
from app.lineage.models import RetrievalEvent
from app.memories.models import Memory
from app.orgs.models import ApiKey
from app.sessions.models import AgentSession


def forget_user(db: Session, *, org_id: uuid.UUID, user_id: uuid.UUID, actor_id: uuid.UUID,
                job_id: uuid.UUID | None, tier: TierClient | None = None) -> dict:
    bind_principal(db, None, org_id=org_id, all_scopes=True)  # an admin action over every scope
    stats = {"episodes_removed": 0, "memories_removed": 0, "memories_quarantined": 0, "sessions_removed": 0,
             "assets_removed": 0, "retrievals_removed": 0, "keys_revoked": 0, "idempotency_replies_removed": 0}
    for eid in db.execute(select(Episode.id).where(Episode.org_id == org_id, Episode.owner_id == user_id)).scalars().all():
        s = forget_episode(db, org_id=org_id, episode_id=eid, actor_id=actor_id, job_id=job_id)
        for k in ("episodes_removed", "memories_removed", "memories_quarantined", "idempotency_replies_removed"):
            stats[k] += s[k]
    stats["memories_removed"] += len(db.execute(delete(Memory).where(Memory.org_id == org_id, Memory.owner_id == user_id)
                                                .returning(Memory.id)).all())
    stats["sessions_removed"] = len(db.execute(delete(AgentSession).where(
        AgentSession.org_id == org_id, AgentSession.owner_id == user_id).returning(AgentSession.id)).all())
    owned = db.execute(select(KnowledgeAsset.id, KnowledgeAsset.content_hash).where(
        KnowledgeAsset.org_id == org_id, KnowledgeAsset.owner_id == user_id)).all()
    hashes = [h for _, h in owned]
    stats["cartridges_stale"] = len(mark_stale(db, org_id, [i for i, _ in owned], reason="source assets deleted"))
    chunk_hashes = list(db.execute(select(Chunk.content_hash).where(
        Chunk.org_id == org_id, Chunk.asset_id.in_([i for i, _ in owned]))).scalars()) if owned else []
    stats["chunk_kv_deleted"] = tier.drop_chunks(chunk_hashes) if tier is not None and chunk_hashes else 0
    stats["assets_removed"] = len(db.execute(delete(KnowledgeAsset).where(
        KnowledgeAsset.org_id == org_id, KnowledgeAsset.owner_id == user_id).returning(KnowledgeAsset.id)).all())
    stats["retrievals_removed"] = len(db.execute(delete(RetrievalEvent).where(
        RetrievalEvent.org_id == org_id, RetrievalEvent.actor_id == user_id).returning(RetrievalEvent.id)).all())
    stats["idempotency_replies_removed"] += idempotency.forget_user_replies(db, org_id, user_id)
    stats["keys_revoked"] = db.execute(update(ApiKey).where(ApiKey.org_id == org_id, ApiKey.user_id == user_id,
                                                            ApiKey.revoked_at.is_(None))
                                       .values(revoked_at=datetime.now(timezone.utc))).rowcount
    record(db, org_id=org_id, actor_id=actor_id, action="user.forget", target_type="user", target_id=user_id,
           details={**stats, "job_id": str(job_id) if job_id else None, "asset_hashes": len(hashes)})
    return stats


def tier_client(settings) -> TierClient | None:  # noqa: ANN001
    """The inference tier to reach with the deletion (None when none is configured)."""
    return TierClient.from_settings(settings)
