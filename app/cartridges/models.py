from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Integer, Text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import AccessMixin, Base, access_check, created_at_col, tenant_fk


class CartridgeRecord(AccessMixin, Base):
    """A trained KV prefix over some assets. Its scope is the most restrictive of its assets, so
    it is handed to a caller only if the caller may read every asset it was trained on."""

    __tablename__ = "cartridges"
    __table_args__ = (access_check(), tenant_fk("owner_id", "users"))
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)  # = the training job's id
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default="active")  # active | stale | erased
    path: Mapped[str] = mapped_column(Text, nullable=False)
    model_id: Mapped[str] = mapped_column(Text, nullable=False)
    p: Mapped[int] = mapped_column(Integer, nullable=False)
    asset_ids: Mapped[list[uuid.UUID]] = mapped_column(ARRAY(UUID(as_uuid=True)), nullable=False)
    stats: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default="{}")
    created_at: Mapped[datetime] = created_at_col()
