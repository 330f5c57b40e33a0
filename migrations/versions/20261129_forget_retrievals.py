"""right to be forgotten reaches retrieval records

A user's retrieval events hold their queries (personal data), so the service role may delete
them; the audit log still records that the deletion happened.

Revision ID: 0005
Revises: 0004
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("GRANT DELETE ON retrieval_events TO memscale_app")


def downgrade() -> None:
    op.execute("REVOKE DELETE ON retrieval_events FROM memscale_app")
