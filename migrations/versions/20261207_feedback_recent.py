"""feedback_recent: the org's latest feedback events by index

`/v1/context` reads the stamp of an org's latest 1,000 feedback events (their count, latest time
and ids) to know whether its calibration of where a context ends is still current
(app/feedback/calibration.py), and refits from those events when it is not. Without an index on
the time, both read and sorted every event the org ever received: a cost that grew with the
org's history on every context. `(org_id, at, id)` makes each a bounded index read.

Revision ID: 0032
Revises: 0030
"""

from alembic import op

revision = "0032"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX ix_feedback_events_recent ON feedback_events (org_id, at, id)")


def downgrade() -> None:
    op.execute("DROP INDEX ix_feedback_events_recent")
