from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, Index, Text, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import (
    AccessMixin,
    Base,
    access_check,
    branch_col,
    created_at_col,
    embedding_col,
    search_indexes,
    tenant_fk,
    tsv_col,
    uuid_pk,
)


class Episode(AccessMixin, Base):
    """Episodic memory: raw, append-only, time-stamped traces."""

    __tablename__ = "episodes"
    __table_args__ = (
        access_check(),
        tenant_fk("owner_id", "users"),
        tenant_fk("branch_id", "branches"),
        Index("ix_episodes_branch", "org_id", "branch_id", postgresql_where="branch_id IS NOT NULL"),
        CheckConstraint("kind IN ('conversation','trajectory','feedback','note')", name="kind"),
        CheckConstraint("outcome IS NULL OR outcome IN ('success','failure','unknown')", name="outcome"),
        Index("ix_episodes_org_owner", "org_id", "owner_id"),
        Index("ix_episodes_org_visibility", "org_id", "visibility"),
        Index("ix_episodes_session_time", "org_id", "session_id", "occurred_at", "id"),
        *search_indexes("episodes"),
        # Hash-partitioned by org (migration 0015, 16 partitions <table>_pNN; docs/decisions.md):
        # one HNSW and one GIN index per partition. The partitions are the migration's business.
        {"postgresql_partition_by": "HASH (org_id)"},
    )
    id: Mapped[uuid.UUID] = uuid_pk()
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False)
    messages: Mapped[list | None] = mapped_column(JSONB)
    session_id: Mapped[str | None] = mapped_column(Text)
    outcome: Mapped[str | None] = mapped_column(Text)
    metadata_: Mapped[dict] = mapped_column("metadata", JSONB, nullable=False, server_default="{}")
    occurred_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())
    created_at: Mapped[datetime] = created_at_col()
    # Set by distillation's judge: useful | skipped | quarantined (suspicious / injection-like).
    quality: Mapped[str | None] = mapped_column(Text)
    branch_id: Mapped[uuid.UUID | None] = branch_col()
    embedding = embedding_col()
    tsv = tsv_col("to_tsvector('english', content)")
