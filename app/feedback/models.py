"""Feedback on what a retrieval handed out, and the votes that make a memory's utility."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Index, Text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import Base, TenantMixin, created_at_col, tenant_fk, uuid_pk


class FeedbackEvent(TenantMixin, Base):
    """One POST /v1/feedback: the items of one retrieval and what the caller said of each. Goes
    with its retrieval record (the reference cascades), with its author, and with the org."""

    __tablename__ = "feedback_events"
    __table_args__ = (
        Index("ix_feedback_events_retrieval", "org_id", "retrieval_id"),
        Index("ix_feedback_events_actor", "org_id", "actor_id"),
        Index("ix_feedback_events_recent", "org_id", "at", "id"),
        tenant_fk("retrieval_id", "retrieval_events"),
        tenant_fk("actor_id", "users"),
    )
    id: Mapped[uuid.UUID] = uuid_pk()
    retrieval_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    actor_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    items: Mapped[list] = mapped_column(JSONB, nullable=False)  # [{type, id, signal}]
    outcome: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = created_at_col()


class FeedbackVote(TenantMixin, Base):
    """At most one vote per (memory, user, signal): a user who says `wrong` a hundred times
    counts once, at the time of their latest say (the utility decays with its age). `helpful`
    and `wrong` of one user exclude each other (the later replaces the earlier). No reference to
    `memories` (a partitioned table): a vote of a removed memory holds ids only and is never read
    (utilities are read for ids the caller is served)."""

    __tablename__ = "feedback_votes"
    __table_args__ = (Index("ix_feedback_votes_actor", "org_id", "actor_id"), tenant_fk("actor_id", "users"))
    memory_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    signal: Mapped[str] = mapped_column(Text, primary_key=True)  # helpful | wrong | outdated
    actor_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    at: Mapped[datetime] = created_at_col()
