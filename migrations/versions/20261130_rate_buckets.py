"""rate_buckets: per-key token buckets shared by every API process (memscale serve --workers N)

UNLOGGED (no WAL: not replicated, emptied by a crash, which only refills the buckets); not
tenant data, so neither org_id nor RLS; the app role reads and updates it.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rate_buckets",
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        prefixes=["UNLOGGED"],
    )
    op.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON rate_buckets TO memscale_app")


def downgrade() -> None:
    op.drop_table("rate_buckets")
