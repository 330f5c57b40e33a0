from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import DateTime, Index, Text
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import Base, TenantMixin, created_at_col, tenant_fk, uuid_pk


class Branch(TenantMixin, Base):
    """A copy-on-write branch of an org's memory (app/kit/tenancy/view.py): its parent (NULL: main) as it
    stood at `fork_at`, plus the rows written with this branch's id. Nothing is copied."""

    __tablename__ = "branches"
    __table_args__ = (
        tenant_fk("parent_id", "branches", ondelete="RESTRICT"),
        Index("ix_branches_name", "org_id", "name", unique=True),
    )
    id: Mapped[uuid.UUID] = uuid_pk()
    name: Mapped[str] = mapped_column(Text, nullable=False)
    parent_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    fork_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    created_by: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    created_at: Mapped[datetime] = created_at_col()
