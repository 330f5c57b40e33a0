from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, Identity, Index, Text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import Base, TenantMixin, created_at_col


class AuditEvent(TenantMixin, Base):
    """Append-only (the database refuses UPDATE/DELETE), hash-chained per org."""

    __tablename__ = "audit_log"
    __table_args__ = (
        Index("ix_audit_org_seq", "org_id", "seq", unique=True),
        Index("ix_audit_target", "org_id", "target_type", "target_id"),
    )
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, nullable=False)
    at: Mapped[datetime] = created_at_col()
    actor_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    action: Mapped[str] = mapped_column(Text, nullable=False)
    target_type: Mapped[str | None] = mapped_column(Text)
    target_id: Mapped[str | None] = mapped_column(Text)
    details: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default="{}")
    prev_hash: Mapped[str] = mapped_column(Text, nullable=False)
    hash: Mapped[str] = mapped_column(Text, nullable=False)
    mac: Mapped[str | None] = mapped_column(Text)  # HMAC(audit key, hash): the service's seal
