"""Declarative base and the column groups every tenant table shares."""

from __future__ import annotations

import uuid
from datetime import datetime

from pgvector.sqlalchemy import Vector
from sqlalchemy import CheckConstraint, DateTime, ForeignKey, MetaData, Text, func
from sqlalchemy.dialects.postgresql import ARRAY, TSVECTOR, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column

EMBEDDING_DIM = 384

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def uuid_pk() -> Mapped[uuid.UUID]:
    return mapped_column(UUID(as_uuid=True), primary_key=True, server_default=func.gen_random_uuid())


def created_at_col() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


class TenantMixin:
    """Every row carries org_id (RLS keys on it)."""

    @declared_attr
    def org_id(cls) -> Mapped[uuid.UUID]:
        return mapped_column(UUID(as_uuid=True), ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False, index=True)


class AccessMixin(TenantMixin):
    """Access scope of a readable item (DESIGN.md §4): owner, visibility, groups, labels."""

    @declared_attr
    def owner_id(cls) -> Mapped[uuid.UUID]:
        return mapped_column(UUID(as_uuid=True), ForeignKey("users.id", ondelete="CASCADE"), nullable=False)

    visibility: Mapped[str] = mapped_column(Text, nullable=False, server_default="private")
    groups: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False, server_default="{}")
    labels: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False, server_default="{}")


def access_check() -> CheckConstraint:
    return CheckConstraint("visibility IN ('private','group','org')", name="visibility")


def embedding_col() -> Mapped[list[float] | None]:
    return mapped_column(Vector(EMBEDDING_DIM), nullable=True)


def tsv_col(expr: str) -> Mapped[str]:
    from sqlalchemy import Computed

    return mapped_column(TSVECTOR, Computed(expr, persisted=True))
