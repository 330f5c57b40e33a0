from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import DateTime, Float, Index, Integer, Text, func
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import AccessMixin, Base, access_check, created_at_col, tenant_fk, uuid_pk


class AgentSession(AccessMixin, Base):
    """MemGPT main context: working-context blocks, a FIFO of messages, a recursive summary."""

    __tablename__ = "sessions"
    __table_args__ = (access_check(), tenant_fk("owner_id", "users"), Index("ix_sessions_org_owner", "org_id", "owner_id"))
    id: Mapped[uuid.UUID] = uuid_pk()
    budget_tokens: Mapped[int] = mapped_column(Integer, nullable=False)
    working_context: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default="{}")
    summary: Mapped[str | None] = mapped_column(Text)
    next_seq: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    evictions: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    outcome: Mapped[str | None] = mapped_column(Text)
    reward: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = created_at_col()
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


class SessionMessage(AccessMixin, Base):
    """A message in the session's main context (the FIFO). Evicted ones live on as episodes."""

    __tablename__ = "session_messages"
    __table_args__ = (
        access_check(),
        tenant_fk("owner_id", "users"),
        tenant_fk("session_id", "sessions"),
        Index("ix_session_messages_seq", "org_id", "session_id", "seq", unique=True),
    )
    id: Mapped[uuid.UUID] = uuid_pk()
    session_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    seq: Mapped[int] = mapped_column(Integer, nullable=False)
    role: Mapped[str] = mapped_column(Text, nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False)
    tokens: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = created_at_col()


class ToolCall(AccessMixin, Base):
    """The session's trajectory of memory-tool calls, for training memory-management policies."""

    __tablename__ = "tool_calls"
    __table_args__ = (
        access_check(),
        tenant_fk("owner_id", "users"),
        tenant_fk("session_id", "sessions"),
        Index("ix_tool_calls_session", "session_id", "seq"),
    )
    id: Mapped[uuid.UUID] = uuid_pk()
    session_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    seq: Mapped[int] = mapped_column(Integer, nullable=False)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    arguments: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default="{}")
    result: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default="{}")
    status: Mapped[str] = mapped_column(Text, nullable=False)  # ok | error
    created_at: Mapped[datetime] = created_at_col()
