"""cartridges

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29 11:24:28.629414
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from app.kit.tenancy.rls import protect

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cartridges",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("status", sa.Text(), server_default="active", nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("model_id", sa.Text(), nullable=False),
        sa.Column("p", sa.Integer(), nullable=False),
        sa.Column("asset_ids", postgresql.ARRAY(sa.UUID()), nullable=False),
        sa.Column("stats", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("visibility", sa.Text(), server_default="private", nullable=False),
        sa.Column("groups", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("labels", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("owner_id", sa.UUID(), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.CheckConstraint("visibility IN ('private','group','org')", name=op.f("ck_cartridges_visibility")),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_cartridges_org_id_orgs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name=op.f("fk_cartridges_owner_id_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cartridges")),
    )
    op.create_index(op.f("ix_cartridges_org_id"), "cartridges", ["org_id"], unique=False)
    protect(op, "cartridges", access=True)


def downgrade() -> None:
    op.drop_index(op.f("ix_cartridges_org_id"), table_name="cartridges")
    op.drop_table("cartridges")
