"""org_id in every tenant key: primary keys (org_id, id), foreign keys between tenant tables
through (org_id, id), unique indexes led by org_id — what an org-sharded deployment (Citus,
distributed by org_id) requires of every primary key, unique constraint and foreign key.

Rows do not change; only constraints are rebuilt (each PK rebuild is one index build: on a large
table run it in a maintenance window, or build the unique index CONCURRENTLY first and attach it
with ADD CONSTRAINT ... PRIMARY KEY USING INDEX). References that crossed orgs would now fail:
none can exist, since RLS and the service never write one.

Revision ID: 0011
Revises: 0010
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# table -> primary key columns after / before
KEYED = [
    "users",
    "api_keys",
    "audit_log",
    "cartridges",
    "chunks",
    "episodes",
    "jobs",
    "knowledge_assets",
    "lineage_edges",
    "memories",
    "retrieval_events",
    "session_messages",
    "sessions",
    "tool_calls",
]
PKS = {t: (["org_id", "id"], ["id"]) for t in KEYED}
PKS["idempotency_keys"] = (["org_id", "user_id", "key", "endpoint"], ["user_id", "key", "endpoint"])

# (table, column, referred table): references between tenant tables, all ON DELETE CASCADE
REFS = [
    ("api_keys", "user_id", "users"),
    ("idempotency_keys", "user_id", "users"),
    ("cartridges", "owner_id", "users"),
    ("chunks", "owner_id", "users"),
    ("episodes", "owner_id", "users"),
    ("knowledge_assets", "owner_id", "users"),
    ("memories", "owner_id", "users"),
    ("session_messages", "owner_id", "users"),
    ("sessions", "owner_id", "users"),
    ("tool_calls", "owner_id", "users"),
    ("chunks", "asset_id", "knowledge_assets"),
    ("session_messages", "session_id", "sessions"),
    ("tool_calls", "session_id", "sessions"),
]

# unique indexes: name -> (table, columns after, columns before)
UNIQUE = {
    "ix_memories_root": ("memories", ["org_id", "root_id", "version"], ["root_id", "version"]),
    "ix_session_messages_seq": ("session_messages", ["org_id", "session_id", "seq"], ["session_id", "seq"]),
}


def _swap(new: bool) -> None:
    after, before = (0, 1) if new else (1, 0)
    for t, col, ref in REFS:  # references first: they depend on the referred primary keys
        op.drop_constraint(f"fk_{t}_{'org_id' if not new else col}_{ref}", t, type_="foreignkey")
    for t, cols in PKS.items():
        op.drop_constraint(f"pk_{t}", t, type_="primary")
        op.create_primary_key(f"pk_{t}", t, cols[after])
    for t, col, ref in REFS:
        if new:
            op.create_foreign_key(f"fk_{t}_org_id_{ref}", t, ref, ["org_id", col], ["org_id", "id"], ondelete="CASCADE")
        else:
            op.create_foreign_key(f"fk_{t}_{col}_{ref}", t, ref, [col], ["id"], ondelete="CASCADE")
    for name, (t, *cols) in UNIQUE.items():
        op.drop_index(name, table_name=t)
        op.create_index(name, t, cols[after], unique=True)


def upgrade() -> None:
    _swap(new=True)


def downgrade() -> None:
    _swap(new=False)
