"""episodes: session index ordered by time

/v1/context fetches the turns just before and after each retrieved conversation turn (a lateral
`ORDER BY occurred_at, id LIMIT 1` per hit within its session). With the session index ordered
by time that is one index probe per side, whatever the session's length; (org_id, session_id)
alone made it read and sort the whole session. The new index serves the old one's queries too.

Revision ID: 0008
Revises: 0007
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_episodes_session_time", "episodes", ["org_id", "session_id", "occurred_at", "id"])
    op.drop_index("ix_episodes_session", table_name="episodes")


def downgrade() -> None:
    op.create_index("ix_episodes_session", "episodes", ["org_id", "session_id"])
    op.drop_index("ix_episodes_session_time", table_name="episodes")
