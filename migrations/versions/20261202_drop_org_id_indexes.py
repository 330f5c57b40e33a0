"""drop the single-column org_id index of every tenant table: each primary key leads with org_id

Since the Citus-ready keys (every tenant table's primary key is (org_id, ...), issue 14) the
btree `ix_<table>_org_id` that TenantMixin declared answers nothing the primary key's first
column does not: every `org_id = $1` scan can use the key instead, and each insert paid one more
index entry. Only indexes: a database migrated down past this revision reads the same.

Revision ID: 0019
Revises: 0018
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

TABLES = (
    "api_keys",
    "audit_log",
    "branch_masks",
    "branches",
    "cartridges",
    "chunks",
    "episodes",
    "idempotency_keys",
    "jobs",
    "knowledge_assets",
    "lexicon",
    "lineage_edges",
    "memories",
    "retrieval_events",
    "session_messages",
    "sessions",
    "tool_calls",
    "users",
)


def upgrade() -> None:
    for t in TABLES:  # on the partitioned tables this drops every partition's copy too
        op.execute(f"DROP INDEX ix_{t}_org_id")


def downgrade() -> None:
    for t in TABLES:
        op.execute(f"CREATE INDEX ix_{t}_org_id ON {t} (org_id)")
