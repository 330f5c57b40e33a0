from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Index, Text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import Base, TenantMixin, branch_col, created_at_col, tenant_fk, uuid_pk


class LineageEdge(TenantMixin, Base):
    """`from` was derived from `to` by `relation` (e.g. memory distilled_from episode)."""

    __tablename__ = "lineage_edges"
    __table_args__ = (
        Index("ix_lineage_from", "org_id", "from_type", "from_id"),
        Index("ix_lineage_to", "org_id", "to_type", "to_id"),
        tenant_fk("branch_id", "branches"),
    )
    id: Mapped[uuid.UUID] = uuid_pk()
    from_type: Mapped[str] = mapped_column(Text, nullable=False)
    from_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    to_type: Mapped[str] = mapped_column(Text, nullable=False)
    to_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    relation: Mapped[str] = mapped_column(Text, nullable=False)
    job_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    at: Mapped[datetime] = created_at_col()
    branch_id: Mapped[uuid.UUID | None] = branch_col()


class RetrievalEvent(TenantMixin, Base):
    """What a search/context call handed out, to whom and why."""

    __tablename__ = "retrieval_events"
    __table_args__ = (Index("ix_retrieval_actor", "org_id", "actor_id", "at"),)
    id: Mapped[uuid.UUID] = uuid_pk()
    actor_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    kind: Mapped[str] = mapped_column(Text, nullable=False)  # search | context | tool
    query: Mapped[str] = mapped_column(Text, nullable=False)
    params: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default="{}")
    items: Mapped[list] = mapped_column(JSONB, nullable=False, server_default="[]")
    at: Mapped[datetime] = created_at_col()
