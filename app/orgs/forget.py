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
from app.kit.db import bind_principal
from app.knowledge.models import Chunk, KnowledgeAsset
from app.lineage.models import RetrievalEvent
from app.memories.models import Memory
from app.orgs.models import ApiKey
from app.sessions.models import AgentSession


def forget_user(db: Session, *, org_id: uuid.UUID, user_id: uuid.UUID, actor_id: uuid.UUID,
                job_id: uuid.UUID | None, inference_url: str | None = None) -> dict:
    bind_principal(db, None, org_id=org_id, all_scopes=True)  # an admin action over every scope
    stats = {"episodes_removed": 0, "memories_removed": 0, "memories_quarantined": 0, "sessions_removed": 0,
             "assets_removed": 0, "retrievals_removed": 0, "keys_revoked": 0}
    for eid in db.execute(select(Episode.id).where(Episode.org_id == org_id, Episode.owner_id == user_id)).scalars().all():
        s = forget_episode(db, org_id=org_id, episode_id=eid, actor_id=actor_id, job_id=job_id)
        for k in ("episodes_removed", "memories_removed", "memories_quarantined"):
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
    stats["chunk_kv_deleted"] = drop_chunk_kv(inference_url, chunk_hashes)
    stats["assets_removed"] = len(db.execute(delete(KnowledgeAsset).where(
        KnowledgeAsset.org_id == org_id, KnowledgeAsset.owner_id == user_id).returning(KnowledgeAsset.id)).all())
    stats["retrievals_removed"] = len(db.execute(delete(RetrievalEvent).where(
        RetrievalEvent.org_id == org_id, RetrievalEvent.actor_id == user_id).returning(RetrievalEvent.id)).all())
    stats["keys_revoked"] = db.execute(update(ApiKey).where(ApiKey.org_id == org_id, ApiKey.user_id == user_id,
                                                            ApiKey.revoked_at.is_(None))
                                       .values(revoked_at=datetime.now(timezone.utc))).rowcount
    record(db, org_id=org_id, actor_id=actor_id, action="user.forget", target_type="user", target_id=user_id,
           details={**stats, "job_id": str(job_id) if job_id else None, "asset_hashes": len(hashes)})
    return stats


def drop_chunk_kv(inference_url: str | None, hashes: list[str], timeout_s: float = 10.0) -> int:
    """Delete the chunk KV caches of removed content in the inference tier (when one is configured).
    Returns how many it held. The tier is content-addressed, so a hash still used by another
    asset would be recomputed on demand; the database deletion does not wait on this call."""
    if not inference_url or not hashes:
        return 0
    import httpx

    n = 0
    with httpx.Client(base_url=inference_url, timeout=timeout_s) as c:
        for h in set(hashes):
            try:
                n += bool(c.delete(f"/v1/chunks/{h}").json().get("deleted"))
            except (httpx.HTTPError, ValueError):
                continue
    return n
