from __future__ import annotations

import uuid

from pgvector.sqlalchemy import Vector
from sqlalchemy import BigInteger, Identity, Integer, SmallInteger, Text, UniqueConstraint
from sqlalchemy.dialects.postgresql import ARRAY, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.database.base import EMBEDDING_DIM, Base, TenantMixin


class Lexeme(TenantMixin, Base):
    """The org's vocabulary: one embedded surface word per lexeme its episodes hold, for the
    vocabulary lift of hybrid ranking (app/search/lexicon.py). Written at ingest; read only
    joined with the lexemes of the rows the caller may be served, so a word of a row the caller
    cannot see never shapes their ranking; a lexeme no row holds any more goes with the last row
    that held it (app/erasure/service.py)."""

    __tablename__ = "lexicon"

    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    word: Mapped[str] = mapped_column(Text, nullable=False)
    embedding = mapped_column(Vector(EMBEDDING_DIM), nullable=False)


class Bm25Bucket(Base):
    """BM25's N and total length of one visibility bucket of an org's item type (one user's private
    rows, the org-visible rows of one label set, or the rows of one group set under one label
    set), split over `shard`s; kept by triggers on the item tables (migration 0024). `owner_id`:
    a private bucket's owner (NULL: shared), so that `visible_to` selects a caller's buckets."""

    __tablename__ = "bm25_buckets"

    org_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    item_type: Mapped[str] = mapped_column(Text, primary_key=True)
    bucket: Mapped[str] = mapped_column(Text, primary_key=True)
    shard: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    owner_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    visibility: Mapped[str] = mapped_column(Text, nullable=False)
    groups: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False)
    labels: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False)
    n: Mapped[int] = mapped_column(BigInteger, nullable=False)
    total_len: Mapped[int] = mapped_column(BigInteger, nullable=False)


class Bm25Df(Base):
    """How many rows of one bucket hold a lexeme (its share of BM25's df), split over `shard`s."""

    __tablename__ = "bm25_df"

    org_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    item_type: Mapped[str] = mapped_column(Text, primary_key=True)
    bucket: Mapped[str] = mapped_column(Text, primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    shard: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    df: Mapped[int] = mapped_column(BigInteger, nullable=False)


class Bm25Owned(Base):
    """How many shared rows of each shape an owner has: an owner sees them all, also those no
    shared bucket gives them (a group they left, a label they are not cleared for)."""

    __tablename__ = "bm25_owned"

    org_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    item_type: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    visibility: Mapped[str] = mapped_column(Text, primary_key=True)
    groups: Mapped[list[str]] = mapped_column(ARRAY(Text), primary_key=True)
    labels: Mapped[list[str]] = mapped_column(ARRAY(Text), primary_key=True)
    shard: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    n: Mapped[int] = mapped_column(BigInteger, nullable=False)


class Bm25BucketId(Base):
    """A small integer naming one visibility bucket of an org's item type (the bucket texts of
    `bm25_buckets`), so that a posting's key is short; taken by the triggers (migration 0033)."""

    __tablename__ = "bm25_bucket_ids"
    # unique with the org (every tenant key includes org_id: Citus-ready), though the identity is
    # unique alone
    __table_args__ = (UniqueConstraint("org_id", "bid", name="uq_bm25_bucket_ids_bid"),)

    org_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    item_type: Mapped[str] = mapped_column(Text, primary_key=True)
    bucket: Mapped[str] = mapped_column(Text, primary_key=True)
    bid: Mapped[int] = mapped_column(Integer, Identity(always=True), nullable=False)


class Bm25Posting(Base):
    """One lexeme of one counted row (main branch, served by default) in its bucket: the text
    top-n sums the idf of the query's lexemes over the caller's buckets' postings (index only)."""

    __tablename__ = "bm25_postings"

    org_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    bid: Mapped[int] = mapped_column(Integer, primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
