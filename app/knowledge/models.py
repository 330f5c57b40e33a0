from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, Integer, Text, func
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import (
    AccessMixin,
    Base,
    access_check,
    branch_col,
    created_at_col,
    embedding_col,
    search_indexes,
    tenant_fk,
    tsv_col,
    uuid_pk,
)


class KnowledgeAsset(AccessMixin, Base):
    """A bootstrapped document, wiki page, table schema or glossary: one per source in main and in
    each branch (a branch that re-bootstraps a changed source writes its own and masks main's)."""

    __tablename__ = "knowledge_assets"
    __table_args__ = (
        access_check(),
        tenant_fk("owner_id", "users"),
        tenant_fk("branch_id", "branches"),
        Index("ix_knowledge_assets_source", "org_id", "source_uri", "branch_id", unique=True, postgresql_nulls_not_distinct=True),
        Index("ix_knowledge_assets_branch", "org_id", "branch_id", postgresql_where="branch_id IS NOT NULL"),
    )
    id: Mapped[uuid.UUID] = uuid_pk()
    kind: Mapped[str] = mapped_column(Text, nullable=False)  # document | table_schema | glossary
    source_uri: Mapped[str] = mapped_column(Text, nullable=False)
    title: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    content_hash: Mapped[str] = mapped_column(Text, nullable=False)
    metadata_: Mapped[dict] = mapped_column("metadata", JSONB, nullable=False, server_default="{}")
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default="active")
    created_at: Mapped[datetime] = created_at_col()
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())
    branch_id: Mapped[uuid.UUID | None] = branch_col()


class Chunk(AccessMixin, Base):
    """A token-aware piece of an asset; content_hash keys its KV cache in the inference tier."""

    __tablename__ = "chunks"
    __table_args__ = (
        access_check(),
        tenant_fk("owner_id", "users"),
        tenant_fk("asset_id", "knowledge_assets"),
        tenant_fk("branch_id", "branches"),
        Index("ix_chunks_branch", "org_id", "branch_id", postgresql_where="branch_id IS NOT NULL"),
        Index("ix_chunks_org_owner", "org_id", "owner_id"),
        Index("ix_chunks_hash", "org_id", "content_hash"),
        *search_indexes("chunks"),
    )
    id: Mapped[uuid.UUID] = uuid_pk()
    asset_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False, index=True)
    ord: Mapped[int] = mapped_column(Integer, nullable=False)
    text: Mapped[str] = mapped_column(Text, nullable=False)
    content_hash: Mapped[str] = mapped_column(Text, nullable=False)
    token_count: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = created_at_col()
    embedding = embedding_col()
    tsv = tsv_col("to_tsvector('english', text)")
    branch_id: Mapped[uuid.UUID | None] = branch_col()  # the asset's


class KnowledgeNode(Base):
    """One node of the knowledge tree (catalog/schema/table/column, folder/document/section,
    glossary/term), written by bootstrap's enrich step. A node belongs to exactly one asset and
    carries that asset's scope, so `visible_to` applies to it as to any item; ancestors shared by
    several assets (a catalog, a schema, a folder) are one row per asset, merged by path on read.
    Ids are uuid5(asset id, path): stable while the asset keeps its name."""

    __tablename__ = "knowledge_nodes"
    __table_args__ = (
        access_check(),
        tenant_fk("asset_id", "knowledge_assets"),
        tenant_fk("branch_id", "branches"),
        Index("ix_knowledge_nodes_branch", "org_id", "branch_id", postgresql_where="branch_id IS NOT NULL"),
        Index("ix_knowledge_nodes_parent", "org_id", "parent_path", "path"),
        Index("ix_knowledge_nodes_path", "org_id", "path", "id"),  # a path's first node by id: 0016
        Index("ix_knowledge_nodes_asset", "org_id", "asset_id"),
        Index("ix_knowledge_nodes_refs", "refs", postgresql_using="gin"),
    )
    org_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("orgs.id", ondelete="CASCADE"), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    asset_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    owner_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)  # the asset's owner
    visibility: Mapped[str] = mapped_column(Text, nullable=False, server_default="private")
    groups: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False, server_default="{}")
    labels: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False, server_default="{}")
    kind: Mapped[str] = mapped_column(Text, nullable=False)  # catalog schema table column folder document section glossary term
    name: Mapped[str] = mapped_column(Text, nullable=False)
    path: Mapped[str] = mapped_column(Text, nullable=False)
    parent_path: Mapped[str] = mapped_column(Text, nullable=False)  # "" for the top level
    ord: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    text: Mapped[str] = mapped_column(Text, nullable=False, server_default="")  # the enriched description
    # qualified column names: a column's own, the columns a glossary term maps to (links by overlap)
    refs: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False, server_default="{}")
    meta: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default="{}")
    created_at: Mapped[datetime] = created_at_col()
    branch_id: Mapped[uuid.UUID | None] = branch_col()  # the asset's
