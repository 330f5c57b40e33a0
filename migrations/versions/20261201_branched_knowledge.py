"""branched knowledge: bootstrap runs in a branch (issue 18)

`branch_id` (NULL: main) on knowledge_assets, chunks and knowledge_nodes, with the same foreign key
to the branch (ON DELETE CASCADE) and the same restrictive row-level security as the memory
tables of 0013 (read: main and the view's branches; write: the transaction's own branch only).
A source is one asset per (org, source_uri) in main and in each branch (NULLS NOT DISTINCT): a
branch that re-bootstraps a changed source writes its own asset and masks main's
(branch_masks, item_type 'knowledge_assets', which hides the asset's chunks and nodes too).
knowledge_nodes gains `created_at`, so a branch or an as-of read sees the nodes that existed then.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

TABLES = ("knowledge_assets", "chunks", "knowledge_nodes")


def _policies() -> dict[str, str]:
    """0013's policies, read from its module file (one definition of the branch rules)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).with_name("20261130_branches.py")
    spec = importlib.util.spec_from_file_location("memscale_migration_0013", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.POLICIES


def upgrade() -> None:
    for t in TABLES:
        op.add_column(t, sa.Column("branch_id", sa.UUID(), nullable=True))
        op.create_foreign_key(
            op.f(f"fk_{t}_org_id_branches"), t, "branches", ["org_id", "branch_id"], ["org_id", "id"], ondelete="CASCADE"
        )
        op.create_index(f"ix_{t}_branch", t, ["org_id", "branch_id"], postgresql_where=sa.text("branch_id IS NOT NULL"))
        for name, body in _policies().items():
            op.execute(f"CREATE POLICY {name} ON {t} AS RESTRICTIVE {body}")
    op.add_column(
        "knowledge_nodes", sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False)
    )
    op.drop_constraint(op.f("uq_knowledge_assets_org_id_source_uri"), "knowledge_assets", type_="unique")
    op.create_index(
        "ix_knowledge_assets_source",
        "knowledge_assets",
        ["org_id", "source_uri", "branch_id"],
        unique=True,
        postgresql_nulls_not_distinct=True,
    )


def downgrade() -> None:
    op.execute("DELETE FROM knowledge_assets WHERE branch_id IS NOT NULL")  # chunks and nodes cascade
    op.execute("DELETE FROM branch_masks WHERE item_type = 'knowledge_assets'")
    op.drop_index("ix_knowledge_assets_source", table_name="knowledge_assets")
    op.create_unique_constraint(op.f("uq_knowledge_assets_org_id_source_uri"), "knowledge_assets", ["org_id", "source_uri"])
    op.drop_column("knowledge_nodes", "created_at")
    for t in reversed(TABLES):
        for name in _policies():
            op.execute(f"DROP POLICY IF EXISTS {name} ON {t}")
        op.drop_index(f"ix_{t}_branch", table_name=t)
        op.drop_constraint(op.f(f"fk_{t}_org_id_branches"), t, type_="foreignkey")
        op.drop_column(t, "branch_id")
