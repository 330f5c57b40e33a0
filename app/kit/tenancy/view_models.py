"""What a branch hides of the layers below it (app/kit/tenancy/view.py): one row per masked item."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Text
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import Base, TenantMixin, created_at_col, tenant_fk


class BranchMask(TenantMixin, Base):
    """In branch `branch_id`, from `at` on, the item `key` of table `item_type` of any layer below
    is hidden: a memory root (the branch wrote its own version, or deleted it) or an episode."""

    __tablename__ = "branch_masks"
    __table_args__ = (tenant_fk("branch_id", "branches"),)
    branch_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    item_type: Mapped[str] = mapped_column(Text, primary_key=True)
    key: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    at: Mapped[datetime] = created_at_col()
