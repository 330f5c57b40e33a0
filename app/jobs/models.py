from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, Float, ForeignKey, Index, Integer, Text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import Base, TenantMixin, branch_col, created_at_col, tenant_fk, uuid_pk


class Job(TenantMixin, Base):
    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint("status IN ('queued','running','succeeded','failed','cancelled')", name="status"),
        Index("ix_jobs_org_status", "org_id", "status"),
        Index("ix_jobs_queue", "status", "created_at"),
        Index("ix_jobs_org_started", "org_id", "started_at"),  # the fair claim: when an org was last served
        Index("ix_jobs_slot", "org_id", "kind", "schedule_slot", unique=True),
        tenant_fk("branch_id", "branches"),
    )
    id: Mapped[uuid.UUID] = uuid_pk()
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    params: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default="{}")
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default="queued")
    progress: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")
    stats: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default="{}")
    error: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    created_at: Mapped[datetime] = created_at_col()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Queue lease: a worker owns a running job until locked_until; a dead worker's job is
    # picked up again after the lease expires (jobs are resumable and idempotent).
    locked_by: Mapped[str | None] = mapped_column(Text)
    locked_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    # Resumable progress (e.g. the distillation watermark reached so far), written with each batch.
    cursor: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default="{}")
    # For periodic jobs: one job per (org, kind, slot) even with many schedulers.
    schedule_slot: Mapped[str | None] = mapped_column(Text)
    # The branch the job reads and writes in (NULL: main); dropping the branch drops its jobs.
    branch_id: Mapped[uuid.UUID | None] = branch_col()


class PipelineCursor(Base):
    """Per-org watermark of a pipeline (distillation: the last episode it has seen)."""

    __tablename__ = "pipeline_cursors"
    org_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("orgs.id", ondelete="CASCADE"), primary_key=True)
    pipeline: Mapped[str] = mapped_column(Text, primary_key=True)
    position: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default="{}")
    updated_at: Mapped[datetime] = created_at_col()
