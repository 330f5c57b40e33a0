"""audit_log: a seal per event (HMAC of its chain hash with a key only the service holds)

The app role can INSERT audit events, so it could append a forged but well-formed one; with a
seal made from a key the database never sees, such an event fails `memscale audit verify`.
Existing events stay unsealed (NULL); verification accepts them only before an org's first seal.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("audit_log", sa.Column("mac", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("audit_log", "mac")
