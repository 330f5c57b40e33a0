"""The shared token buckets of `PgRateLimiter` (app/kit/http/limits.py): one row per limited holder.

Not tenant data (a counter keyed by limiter and key holder), so no org_id, no RLS; UNLOGGED: no
WAL (nothing to replicate, no write amplification per request), emptied by a crash, which only
refills every bucket."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Float, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import Base


class RateBucket(Base):
    __tablename__ = "rate_buckets"
    __table_args__ = {"prefixes": ["UNLOGGED"]}

    key: Mapped[str] = mapped_column(Text, primary_key=True)
    tokens: Mapped[float] = mapped_column(Float, nullable=False)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
