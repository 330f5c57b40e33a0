"""knowledge_nodes: the navigable tree bootstrap's enrich step writes (issue 17)

One row per node of an asset (catalog/schema/table/column, folder/document/section,
glossary/term) with the asset's scope, so the access policy is the same as for chunks.
Primary key (org_id, id) and a foreign key (org_id, asset_id) -> knowledge_assets(org_id, id):
Citus-ready (distributed by org); knowledge_assets' primary key is (org_id, id) since 0011.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from app.kit.tenancy.rls import protect

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "knowledge_nodes",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("asset_id", sa.UUID(), nullable=False),
        sa.Column("owner_id", sa.UUID(), nullable=False),
        sa.Column("visibility", sa.Text(), server_default="private", nullable=False),
        sa.Column("groups", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("labels", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("parent_path", sa.Text(), nullable=False),
        sa.Column("ord", sa.Integer(), server_default="0", nullable=False),
        sa.Column("text", sa.Text(), server_default="", nullable=False),
        sa.Column("refs", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("meta", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.CheckConstraint("visibility IN ('private','group','org')", name=op.f("ck_knowledge_nodes_visibility")),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_knowledge_nodes_org_id_orgs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["org_id", "asset_id"],
            ["knowledge_assets.org_id", "knowledge_assets.id"],
            name=op.f("fk_knowledge_nodes_org_id_knowledge_assets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("org_id", "id", name=op.f("pk_knowledge_nodes")),
    )
    op.create_index("ix_knowledge_nodes_parent", "knowledge_nodes", ["org_id", "parent_path", "path"])
    op.create_index("ix_knowledge_nodes_path", "knowledge_nodes", ["org_id", "path"])
    op.create_index("ix_knowledge_nodes_asset", "knowledge_nodes", ["org_id", "asset_id"])
    op.create_index("ix_knowledge_nodes_refs", "knowledge_nodes", ["refs"], postgresql_using="gin")
    protect(op, "knowledge_nodes", access=True)


def downgrade() -> None:
    op.execute("DROP POLICY IF EXISTS tenant_access ON knowledge_nodes")
    op.drop_table("knowledge_nodes")
