"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 10:04:32.721167
"""

import pgvector.sqlalchemy
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.create_table(
        "orgs",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("settings", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_orgs")),
        sa.UniqueConstraint("name", name=op.f("uq_orgs_name")),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("actor_id", sa.UUID(), nullable=True),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("target_type", sa.Text(), nullable=True),
        sa.Column("target_id", sa.Text(), nullable=True),
        sa.Column("details", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.Column("prev_hash", sa.Text(), nullable=False),
        sa.Column("hash", sa.Text(), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_audit_log_org_id_orgs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index(op.f("ix_audit_log_org_id"), "audit_log", ["org_id"], unique=False)
    op.create_index("ix_audit_org_seq", "audit_log", ["org_id", "seq"], unique=True)
    op.create_index("ix_audit_target", "audit_log", ["org_id", "target_type", "target_id"], unique=False)
    op.create_table(
        "jobs",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("params", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.Column("status", sa.Text(), server_default="queued", nullable=False),
        sa.Column("progress", sa.Float(), server_default="0", nullable=False),
        sa.Column("stats", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_by", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.CheckConstraint("status IN ('queued','running','succeeded','failed')", name=op.f("ck_jobs_status")),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_jobs_org_id_orgs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index(op.f("ix_jobs_org_id"), "jobs", ["org_id"], unique=False)
    op.create_index("ix_jobs_org_status", "jobs", ["org_id", "status"], unique=False)
    op.create_table(
        "lineage_edges",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("from_type", sa.Text(), nullable=False),
        sa.Column("from_id", sa.UUID(), nullable=False),
        sa.Column("to_type", sa.Text(), nullable=False),
        sa.Column("to_id", sa.UUID(), nullable=False),
        sa.Column("relation", sa.Text(), nullable=False),
        sa.Column("job_id", sa.UUID(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_lineage_edges_org_id_orgs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lineage_edges")),
    )
    op.create_index(op.f("ix_lineage_edges_org_id"), "lineage_edges", ["org_id"], unique=False)
    op.create_index("ix_lineage_from", "lineage_edges", ["org_id", "from_type", "from_id"], unique=False)
    op.create_index("ix_lineage_to", "lineage_edges", ["org_id", "to_type", "to_id"], unique=False)
    op.create_table(
        "retrieval_events",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("actor_id", sa.UUID(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("params", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.Column("items", postgresql.JSONB(astext_type=sa.Text()), server_default="[]", nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_retrieval_events_org_id_orgs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_retrieval_events")),
    )
    op.create_index("ix_retrieval_actor", "retrieval_events", ["org_id", "actor_id", "at"], unique=False)
    op.create_index(op.f("ix_retrieval_events_org_id"), "retrieval_events", ["org_id"], unique=False)
    op.create_table(
        "users",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("roles", sa.ARRAY(sa.Text()), server_default="{member}", nullable=False),
        sa.Column("groups", sa.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("clearances", sa.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_users_org_id_orgs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("org_id", "name", name=op.f("uq_users_org_id_name")),
    )
    op.create_index(op.f("ix_users_org_id"), "users", ["org_id"], unique=False)
    op.create_table(
        "api_keys",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("user_id", sa.UUID(), nullable=False),
        sa.Column("salt", sa.LargeBinary(), nullable=False),
        sa.Column("secret_hash", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_api_keys_org_id_orgs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_api_keys_user_id_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
    )
    op.create_index(op.f("ix_api_keys_org_id"), "api_keys", ["org_id"], unique=False)
    op.create_index(op.f("ix_api_keys_user_id"), "api_keys", ["user_id"], unique=False)
    op.create_table(
        "episodes",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("messages", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("session_id", sa.Text(), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("metadata", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("embedding", pgvector.sqlalchemy.vector.VECTOR(dim=384), nullable=True),
        sa.Column("tsv", postgresql.TSVECTOR(), sa.Computed("to_tsvector('english', content)", persisted=True), nullable=True),
        sa.Column("visibility", sa.Text(), server_default="private", nullable=False),
        sa.Column("groups", sa.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("labels", sa.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("owner_id", sa.UUID(), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.CheckConstraint("kind IN ('conversation','trajectory','feedback','note')", name=op.f("ck_episodes_kind")),
        sa.CheckConstraint("outcome IS NULL OR outcome IN ('success','failure','unknown')", name=op.f("ck_episodes_outcome")),
        sa.CheckConstraint("visibility IN ('private','group','org')", name=op.f("ck_episodes_visibility")),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_episodes_org_id_orgs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name=op.f("fk_episodes_owner_id_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_episodes")),
    )
    op.create_index(
        "ix_episodes_embedding_hnsw",
        "episodes",
        ["embedding"],
        unique=False,
        postgresql_using="hnsw",
        postgresql_with={"m": 16, "ef_construction": 64},
        postgresql_ops={"embedding": "vector_cosine_ops"},
    )
    op.create_index(op.f("ix_episodes_org_id"), "episodes", ["org_id"], unique=False)
    op.create_index("ix_episodes_org_owner", "episodes", ["org_id", "owner_id"], unique=False)
    op.create_index("ix_episodes_org_visibility", "episodes", ["org_id", "visibility"], unique=False)
    op.create_index("ix_episodes_session", "episodes", ["org_id", "session_id"], unique=False)
    op.create_index("ix_episodes_tsv", "episodes", ["tsv"], unique=False, postgresql_using="gin")
    op.create_table(
        "idempotency_keys",
        sa.Column("user_id", sa.UUID(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("endpoint", sa.Text(), nullable=False),
        sa.Column("request_hash", sa.Text(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("response", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_idempotency_keys_org_id_orgs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_idempotency_keys_user_id_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("user_id", "key", "endpoint", name=op.f("pk_idempotency_keys")),
    )
    op.create_index(op.f("ix_idempotency_keys_org_id"), "idempotency_keys", ["org_id"], unique=False)
    op.create_table(
        "knowledge_assets",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("source_uri", sa.Text(), nullable=False),
        sa.Column("title", sa.Text(), server_default="", nullable=False),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.Column("metadata", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.Column("status", sa.Text(), server_default="active", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("visibility", sa.Text(), server_default="private", nullable=False),
        sa.Column("groups", sa.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("labels", sa.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("owner_id", sa.UUID(), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.CheckConstraint("visibility IN ('private','group','org')", name=op.f("ck_knowledge_assets_visibility")),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_knowledge_assets_org_id_orgs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name=op.f("fk_knowledge_assets_owner_id_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_knowledge_assets")),
        sa.UniqueConstraint("org_id", "source_uri", name=op.f("uq_knowledge_assets_org_id_source_uri")),
    )
    op.create_index(op.f("ix_knowledge_assets_org_id"), "knowledge_assets", ["org_id"], unique=False)
    op.create_table(
        "memories",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("root_id", sa.UUID(), nullable=False),
        sa.Column("version", sa.Integer(), server_default="1", nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), server_default="active", nullable=False),
        sa.Column("confidence", sa.Float(), server_default="0.8", nullable=False),
        sa.Column("provenance", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.Column("valid_from", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True),
        sa.Column("recorded_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("superseded_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_validated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("embedding", pgvector.sqlalchemy.vector.VECTOR(dim=384), nullable=True),
        sa.Column("tsv", postgresql.TSVECTOR(), sa.Computed("to_tsvector('english', text)", persisted=True), nullable=True),
        sa.Column("visibility", sa.Text(), server_default="private", nullable=False),
        sa.Column("groups", sa.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("labels", sa.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("owner_id", sa.UUID(), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.CheckConstraint("kind IN ('fact','rule','preference','procedure','schema_hint')", name=op.f("ck_memories_kind")),
        sa.CheckConstraint("status IN ('active','superseded','quarantined','deleted')", name=op.f("ck_memories_status")),
        sa.CheckConstraint("visibility IN ('private','group','org')", name=op.f("ck_memories_visibility")),
        sa.CheckConstraint("confidence >= 0 AND confidence <= 1", name=op.f("ck_memories_confidence")),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_memories_org_id_orgs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name=op.f("fk_memories_owner_id_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memories")),
    )
    op.create_index(
        "ix_memories_embedding_hnsw",
        "memories",
        ["embedding"],
        unique=False,
        postgresql_using="hnsw",
        postgresql_with={"m": 16, "ef_construction": 64},
        postgresql_ops={"embedding": "vector_cosine_ops"},
    )
    op.create_index(op.f("ix_memories_org_id"), "memories", ["org_id"], unique=False)
    op.create_index("ix_memories_org_owner", "memories", ["org_id", "owner_id"], unique=False)
    op.create_index("ix_memories_org_status", "memories", ["org_id", "status"], unique=False)
    op.create_index("ix_memories_root", "memories", ["root_id", "version"], unique=True)
    op.create_index("ix_memories_tsv", "memories", ["tsv"], unique=False, postgresql_using="gin")
    op.create_table(
        "chunks",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("asset_id", sa.UUID(), nullable=False),
        sa.Column("ord", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("embedding", pgvector.sqlalchemy.vector.VECTOR(dim=384), nullable=True),
        sa.Column("tsv", postgresql.TSVECTOR(), sa.Computed("to_tsvector('english', text)", persisted=True), nullable=True),
        sa.Column("visibility", sa.Text(), server_default="private", nullable=False),
        sa.Column("groups", sa.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("labels", sa.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("owner_id", sa.UUID(), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.CheckConstraint("visibility IN ('private','group','org')", name=op.f("ck_chunks_visibility")),
        sa.ForeignKeyConstraint(
            ["asset_id"], ["knowledge_assets.id"], name=op.f("fk_chunks_asset_id_knowledge_assets"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_chunks_org_id_orgs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name=op.f("fk_chunks_owner_id_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chunks")),
    )
    op.create_index(op.f("ix_chunks_asset_id"), "chunks", ["asset_id"], unique=False)
    op.create_index(
        "ix_chunks_embedding_hnsw",
        "chunks",
        ["embedding"],
        unique=False,
        postgresql_using="hnsw",
        postgresql_with={"m": 16, "ef_construction": 64},
        postgresql_ops={"embedding": "vector_cosine_ops"},
    )
    op.create_index("ix_chunks_hash", "chunks", ["org_id", "content_hash"], unique=False)
    op.create_index(op.f("ix_chunks_org_id"), "chunks", ["org_id"], unique=False)
    op.create_index("ix_chunks_org_owner", "chunks", ["org_id", "owner_id"], unique=False)
    op.create_index("ix_chunks_tsv", "chunks", ["tsv"], unique=False, postgresql_using="gin")


def downgrade() -> None:
    op.drop_index("ix_chunks_tsv", table_name="chunks", postgresql_using="gin")
    op.drop_index("ix_chunks_org_owner", table_name="chunks")
    op.drop_index(op.f("ix_chunks_org_id"), table_name="chunks")
    op.drop_index("ix_chunks_hash", table_name="chunks")
    op.drop_index(
        "ix_chunks_embedding_hnsw",
        table_name="chunks",
        postgresql_using="hnsw",
        postgresql_with={"m": 16, "ef_construction": 64},
        postgresql_ops={"embedding": "vector_cosine_ops"},
    )
    op.drop_index(op.f("ix_chunks_asset_id"), table_name="chunks")
    op.drop_table("chunks")
    op.drop_index("ix_memories_tsv", table_name="memories", postgresql_using="gin")
    op.drop_index("ix_memories_root", table_name="memories")
    op.drop_index("ix_memories_org_status", table_name="memories")
    op.drop_index("ix_memories_org_owner", table_name="memories")
    op.drop_index(op.f("ix_memories_org_id"), table_name="memories")
    op.drop_index(
        "ix_memories_embedding_hnsw",
        table_name="memories",
        postgresql_using="hnsw",
        postgresql_with={"m": 16, "ef_construction": 64},
        postgresql_ops={"embedding": "vector_cosine_ops"},
    )
    op.drop_table("memories")
    op.drop_index(op.f("ix_knowledge_assets_org_id"), table_name="knowledge_assets")
    op.drop_table("knowledge_assets")
    op.drop_index(op.f("ix_idempotency_keys_org_id"), table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
    op.drop_index("ix_episodes_tsv", table_name="episodes", postgresql_using="gin")
    op.drop_index("ix_episodes_session", table_name="episodes")
    op.drop_index("ix_episodes_org_visibility", table_name="episodes")
    op.drop_index("ix_episodes_org_owner", table_name="episodes")
    op.drop_index(op.f("ix_episodes_org_id"), table_name="episodes")
    op.drop_index(
        "ix_episodes_embedding_hnsw",
        table_name="episodes",
        postgresql_using="hnsw",
        postgresql_with={"m": 16, "ef_construction": 64},
        postgresql_ops={"embedding": "vector_cosine_ops"},
    )
    op.drop_table("episodes")
    op.drop_index(op.f("ix_api_keys_user_id"), table_name="api_keys")
    op.drop_index(op.f("ix_api_keys_org_id"), table_name="api_keys")
    op.drop_table("api_keys")
    op.drop_index(op.f("ix_users_org_id"), table_name="users")
    op.drop_table("users")
    op.drop_index(op.f("ix_retrieval_events_org_id"), table_name="retrieval_events")
    op.drop_index("ix_retrieval_actor", table_name="retrieval_events")
    op.drop_table("retrieval_events")
    op.drop_index("ix_lineage_to", table_name="lineage_edges")
    op.drop_index("ix_lineage_from", table_name="lineage_edges")
    op.drop_index(op.f("ix_lineage_edges_org_id"), table_name="lineage_edges")
    op.drop_table("lineage_edges")
    op.drop_index("ix_jobs_org_status", table_name="jobs")
    op.drop_index(op.f("ix_jobs_org_id"), table_name="jobs")
    op.drop_table("jobs")
    op.drop_index("ix_audit_target", table_name="audit_log")
    op.drop_index("ix_audit_org_seq", table_name="audit_log")
    op.drop_index(op.f("ix_audit_log_org_id"), table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_table("orgs")
