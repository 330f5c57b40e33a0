"""Which embedding model an org's vectors come from, the org's re-embedding in progress, and the
vectors that re-embedding has made so far.

One model per org, not per row: every vector an org's searches compare was made by one model, so
no statement needs a per-row model filter and one vector index per table serves every org
(docs/decisions/embedders.md)."""

from __future__ import annotations

import uuid
from datetime import datetime

from pgvector.sqlalchemy import Vector
from sqlalchemy import BigInteger, CheckConstraint, DateTime, ForeignKeyConstraint, Index, Integer, Text, func
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import EMBEDDING_DIM, Base, TenantMixin, tenant_fk


class OrgEmbedder(TenantMixin, Base):
    """The model (its id, e.g. `local/all-minilm-l6-v2`) whose vectors the org's rows hold, and
    their dimension. Changes only at the end of a re-embedding, in one transaction with the
    vectors themselves."""

    __tablename__ = "org_embedders"

    model: Mapped[str] = mapped_column(Text, nullable=False)
    dim: Mapped[int] = mapped_column(Integer, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


class Reembedding(TenantMixin, Base):
    """An org's re-embedding under way (at most one): the new model, how many of the org's
    vectors it has staged (`done`) out of how many it has to make (`total`)."""

    __tablename__ = "reembeddings"

    model: Mapped[str] = mapped_column(Text, nullable=False)
    dim: Mapped[int] = mapped_column(Integer, nullable=False)
    done: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    total: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())
    job_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))


class StagedVector(TenantMixin, Base):
    """A row's vector by the model being switched to, until the switch copies it into the row.
    Each references its row with ON DELETE CASCADE, so an erasure or a retention run during the
    re-embedding leaves no vector of a deleted row behind."""

    __tablename__ = "embedding_staging"
    __table_args__ = (
        tenant_fk("episode_id", "episodes"),
        tenant_fk("memory_id", "memories"),
        tenant_fk("chunk_id", "chunks"),
        ForeignKeyConstraint(["org_id", "lexeme"], ["lexicon.org_id", "lexicon.lexeme"], ondelete="CASCADE"),
        CheckConstraint("num_nonnulls(episode_id, memory_id, chunk_id, lexeme) = 1", name="one_item"),
        # The cascades look rows up by their reference.
        Index("ix_embedding_staging_episode", "org_id", "episode_id", postgresql_where="episode_id IS NOT NULL"),
        Index("ix_embedding_staging_memory", "org_id", "memory_id", postgresql_where="memory_id IS NOT NULL"),
        Index("ix_embedding_staging_chunk", "org_id", "chunk_id", postgresql_where="chunk_id IS NOT NULL"),
        Index("ix_embedding_staging_lexeme", "org_id", "lexeme", postgresql_where="lexeme IS NOT NULL"),
    )

    item_type: Mapped[str] = mapped_column(Text, primary_key=True)  # episode, memory, chunk, lexeme
    item_key: Mapped[str] = mapped_column(Text, primary_key=True)  # the row's id, or the lexeme
    episode_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    memory_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    chunk_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    lexeme: Mapped[str | None] = mapped_column(Text)
    embedding = mapped_column(Vector(EMBEDDING_DIM), nullable=False)
