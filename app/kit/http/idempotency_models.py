"""The table of stored Idempotency-Key replies (app/kit/http/idempotency.py)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import Base, TenantMixin, created_at_col, tenant_fk


class IdempotencyRecord(TenantMixin, Base):
    """First result of a request made with an Idempotency-Key (per user)."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (tenant_fk("user_id", "users"),)
    user_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    endpoint: Mapped[str] = mapped_column(Text, primary_key=True)
    request_hash: Mapped[str] = mapped_column(Text, nullable=False)
    status_code: Mapped[int] = mapped_column(nullable=False)
    response: Mapped[dict] = mapped_column(JSONB, nullable=False)
    created_at: Mapped[datetime] = created_at_col()
