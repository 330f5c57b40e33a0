"""sessions and tool calls

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 10:35:36.489658
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from app.kit.tenancy.rls import protect

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("budget_tokens", sa.Integer(), nullable=False),
        sa.Column("working_context", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("next_seq", sa.Integer(), server_default="1", nullable=False),
        sa.Column("evictions", sa.Integer(), server_default="0", nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("visibility", sa.Text(), server_default="private", nullable=False),
        sa.Column("groups", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("labels", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("owner_id", sa.UUID(), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.CheckConstraint("visibility IN ('private','group','org')", name=op.f("ck_sessions_visibility")),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_sessions_org_id_orgs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name=op.f("fk_sessions_owner_id_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
    )
    op.create_index(op.f("ix_sessions_org_id"), "sessions", ["org_id"], unique=False)
    op.create_index("ix_sessions_org_owner", "sessions", ["org_id", "owner_id"], unique=False)
    op.create_table(
        "session_messages",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("session_id", sa.UUID(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("visibility", sa.Text(), server_default="private", nullable=False),
        sa.Column("groups", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("labels", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("owner_id", sa.UUID(), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.CheckConstraint("visibility IN ('private','group','org')", name=op.f("ck_session_messages_visibility")),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_session_messages_org_id_orgs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name=op.f("fk_session_messages_owner_id_users"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_session_messages_session_id_sessions"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_session_messages")),
    )
    op.create_index(op.f("ix_session_messages_org_id"), "session_messages", ["org_id"], unique=False)
    op.create_index("ix_session_messages_seq", "session_messages", ["session_id", "seq"], unique=True)
    op.create_table(
        "tool_calls",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("session_id", sa.UUID(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("arguments", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("visibility", sa.Text(), server_default="private", nullable=False),
        sa.Column("groups", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("labels", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("owner_id", sa.UUID(), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.CheckConstraint("visibility IN ('private','group','org')", name=op.f("ck_tool_calls_visibility")),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_tool_calls_org_id_orgs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name=op.f("fk_tool_calls_owner_id_users"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_tool_calls_session_id_sessions"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tool_calls")),
    )
    op.create_index(op.f("ix_tool_calls_org_id"), "tool_calls", ["org_id"], unique=False)
    op.create_index("ix_tool_calls_session", "tool_calls", ["session_id", "seq"], unique=False)
    for t in ("sessions", "session_messages", "tool_calls"):
        protect(op, t, access=True)


def downgrade() -> None:
    op.drop_index("ix_tool_calls_session", table_name="tool_calls")
    op.drop_index(op.f("ix_tool_calls_org_id"), table_name="tool_calls")
    op.drop_table("tool_calls")
    op.drop_index("ix_session_messages_seq", table_name="session_messages")
    op.drop_index(op.f("ix_session_messages_org_id"), table_name="session_messages")
    op.drop_table("session_messages")
    op.drop_index("ix_sessions_org_owner", table_name="sessions")
    op.drop_index(op.f("ix_sessions_org_id"), table_name="sessions")
    op.drop_table("sessions")
