"""Declarative base and the column groups every tenant table shares."""

from __future__ import annotations

import uuid
from datetime import datetime

from pgvector.sqlalchemy import Vector
from sqlalchemy import CheckConstraint, DateTime, ForeignKey, ForeignKeyConstraint, Index, MetaData, Text, func, literal_column
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
    """Every row carries org_id (RLS keys on it), and org_id leads the table's primary key: the
    distribution column of an org-sharded deployment (Citus) must be in every primary key,
    unique constraint and foreign key (docs/scale-out.md; tests/test_citus_ready.py checks the
    catalog). References to other tenant tables are `tenant_fk`s for the same reason.

    The ORM identifies a row by the table's key too, (org_id, id): every UPDATE and DELETE it
    flushes names the org (`db.get(Model, (org_id, id))`), so on Citus each is routed to one
    shard instead of fanning out (tests/test_citus_ready.py captures the statements).

    No index of org_id alone: the primary key's first column serves every `org_id = ...` scan
    (migration 0019 dropped the ones declared before)."""

    @declared_attr
    def org_id(cls) -> Mapped[uuid.UUID]:
        return mapped_column(
            UUID(as_uuid=True), ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False, primary_key=True, sort_order=-1
        )


def tenant_fk(column: str, table: str, ondelete: str = "CASCADE") -> ForeignKeyConstraint:
    """A reference to another tenant table through (org_id, its id): never across orgs, and
    colocated on one shard when both tables are distributed by org_id."""
    return ForeignKeyConstraint(["org_id", column], [f"{table}.org_id", f"{table}.id"], ondelete=ondelete)


def search_indexes(table: str) -> tuple[Index, ...]:
    """The indexes a searchable item table carries: the HNSW graph of every row, the org-visible
    rows' own graph (filtered kNN for a caller in no group, app/search/repository/vector.py
    `split_ids`), the GIN index of its text, and the text of the org-visible and of the group rows
    with their org (and groups) in one GIN index each (`btree_gin`: `bm25_hits_<type>` finds a
    lexeme's rows the caller may see without reading the others)."""
    hnsw = {
        "postgresql_using": "hnsw",
        "postgresql_with": {"m": 16, "ef_construction": 64},
        "postgresql_ops": {"embedding": "vector_cosine_ops"},
    }
    return (
        Index(f"ix_{table}_embedding_hnsw", "embedding", **hnsw),
        Index(f"ix_{table}_embedding_org_hnsw", "embedding", postgresql_where="visibility = 'org'", **hnsw),
        Index(f"ix_{table}_tsv", "tsv", postgresql_using="gin"),
        Index(f"ix_{table}_tsv_org", "org_id", "tsv", postgresql_using="gin", postgresql_where="visibility = 'org'"),
        Index(
            f"ix_{table}_tsv_group", "org_id", "groups", "tsv", postgresql_using="gin", postgresql_where="visibility = 'group'"
        ),
        # The group rows of a caller's groups by their first group, and the few rows of several
        # groups apart: `visible_to`'s group test in a form row-level security lets an index lead
        # (app/kit/tenancy/access.py, migration 0036).
        Index(f"ix_{table}_group_first", "org_id", literal_column("(groups[1])"), postgresql_where="visibility = 'group'"),
        Index(f"ix_{table}_group_more", "org_id", postgresql_where="visibility = 'group' AND cardinality(groups) > 1"),
    )


class AccessMixin(TenantMixin):
    """Access scope of a readable item (DESIGN.md §4): owner, visibility, groups, labels."""

    @declared_attr
    def owner_id(cls) -> Mapped[uuid.UUID]:  # references users through tenant_fk("owner_id", "users")
        return mapped_column(UUID(as_uuid=True), nullable=False)

    visibility: Mapped[str] = mapped_column(Text, nullable=False, server_default="private")
    groups: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False, server_default="{}")
    labels: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False, server_default="{}")


def access_check() -> CheckConstraint:
    return CheckConstraint("visibility IN ('private','group','org')", name="visibility")


def branch_col() -> Mapped[uuid.UUID | None]:
    """The branch a row was written in (NULL: main); see app/kit/tenancy/view.py. Pair it with
    `tenant_fk("branch_id", "branches")` so that dropping a branch drops its rows."""
    return mapped_column(UUID(as_uuid=True), nullable=True)


def embedding_col() -> Mapped[list[float] | None]:
    return mapped_column(Vector(EMBEDDING_DIM), nullable=True)


def tsv_col(expr: str) -> Mapped[str]:
    from sqlalchemy import Computed

    return mapped_column(TSVECTOR, Computed(expr, persisted=True))
