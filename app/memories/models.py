from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, Float, Index, Integer, Text, func
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import (
    AccessMixin,
    Base,
    access_check,
    branch_col,
    embedding_col,
    search_indexes,
    tenant_fk,
    tsv_col,
    uuid_pk,
)

MEMORY_KINDS = ("fact", "rule", "preference", "procedure", "schema_hint", "instruction", "skill")
AGENT_KINDS = ("instruction", "skill")  # an agent's profile: its system prompt and skills
MEMORY_STATUSES = ("active", "superseded", "quarantined", "deleted")


class Memory(AccessMixin, Base):
    """Semantic memory. Versioned: each version is a row; `root_id` ties the versions together.

    Bi-temporal: valid_from/valid_to (true in the world), recorded_at/superseded_at (known to us).
    """

    __tablename__ = "memories"
    __table_args__ = (
        access_check(),
        tenant_fk("owner_id", "users"),
        tenant_fk("branch_id", "branches"),
        CheckConstraint("kind IN ('fact','rule','preference','procedure','schema_hint','instruction','skill')", name="kind"),
        CheckConstraint("(kind IN ('instruction','skill')) = (agent_id IS NOT NULL)", name="agent_profile"),
        Index("ix_memories_agent", "org_id", "agent_id", postgresql_where="agent_id IS NOT NULL"),
        CheckConstraint("status IN ('active','superseded','quarantined','deleted')", name="status"),
        CheckConstraint("confidence >= 0 AND confidence <= 1", name="confidence"),
        Index("ix_memories_org_owner", "org_id", "owner_id"),
        Index("ix_memories_org_status", "org_id", "status"),
        # One version n per root in main and in each branch (a branch's version n+1 of a main
        # memory and main's own later n+1 are different rows).
        Index("ix_memories_root", "org_id", "root_id", "version", "branch_id", unique=True, postgresql_nulls_not_distinct=True),
        Index("ix_memories_branch", "org_id", "branch_id", postgresql_where="branch_id IS NOT NULL"),
        *search_indexes("memories"),
        # Hash-partitioned by org (migration 0015, 16 partitions <table>_pNN; docs/decisions.md):
        # one HNSW and one GIN index per partition. The partitions are the migration's business.
        {"postgresql_partition_by": "HASH (org_id)"},
    )
    id: Mapped[uuid.UUID] = uuid_pk()
    root_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    version: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    text: Mapped[str] = mapped_column(Text, nullable=False)
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default="active")
    confidence: Mapped[float] = mapped_column(Float, nullable=False, server_default="0.8")
    provenance: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default="{}")
    valid_from: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())
    valid_to: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    recorded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())
    superseded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_validated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())
    branch_id: Mapped[uuid.UUID | None] = branch_col()
    # The agent whose profile this item is part of (kinds instruction and skill only).
    agent_id: Mapped[str | None] = mapped_column(Text)
    embedding = embedding_col()
    tsv = tsv_col("to_tsvector('english', text)")
