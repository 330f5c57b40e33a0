"""The memory manager's record: each store / merge / supersede / drop decision with the features it
was taken on, and the learned policies trained on them, one row per version."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Index, Integer, Text, UniqueConstraint
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import Base, TenantMixin, created_at_col, tenant_fk, uuid_pk


class ManagerDecision(TenantMixin, Base):
    """One decision of distillation or consolidation about a candidate memory: the action taken,
    what the rules would have done, the policy version that took it (None: the rules), its
    features (numbers only, no text), the memory it produced or kept serving (`memory_id`, None
    when dropped), the neighbour it was compared with, and `source` (the episode or scope it came
    from: the unit of the held-out split). Goes with the org and with `owner_id` (the memory's
    owner) when that user is forgotten."""

    __tablename__ = "manager_decisions"
    __table_args__ = (
        Index("ix_manager_decisions_at", "org_id", "at"),
        Index("ix_manager_decisions_owner", "org_id", "owner_id"),
        tenant_fk("owner_id", "users"),
    )
    id: Mapped[uuid.UUID] = uuid_pk()
    stage: Mapped[str] = mapped_column(Text, nullable=False)  # distill | consolidate
    action: Mapped[str] = mapped_column(Text, nullable=False)  # new | merge | supersede | drop
    rules_action: Mapped[str] = mapped_column(Text, nullable=False)
    policy_version: Mapped[int | None] = mapped_column(Integer)
    features: Mapped[dict] = mapped_column(JSONB, nullable=False)
    memory_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    neighbour_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    source: Mapped[str] = mapped_column(Text, nullable=False)
    owner_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    job_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    at: Mapped[datetime] = created_at_col()


class ManagerPolicy(TenantMixin, Base):
    """One trained version of an org's learned manager: its weights, its held-out metrics against
    the rules, and what it was trained on (`training`: count and SHA-256 of the decision ids, the
    split). `status`: active (used by the pipelines: it beat the rules on held-out data), inactive,
    or retired (decisions it was trained on were erased)."""

    __tablename__ = "manager_policies"
    __table_args__ = (UniqueConstraint("org_id", "version"),)
    id: Mapped[uuid.UUID] = uuid_pk()
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    status: Mapped[str] = mapped_column(Text, nullable=False)
    weights: Mapped[dict] = mapped_column(JSONB, nullable=False)
    metrics: Mapped[dict] = mapped_column(JSONB, nullable=False)
    training: Mapped[dict] = mapped_column(JSONB, nullable=False)
    created_by: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    job_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    at: Mapped[datetime] = created_at_col()
