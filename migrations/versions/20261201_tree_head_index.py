"""knowledge tree: the node at a path, first by id, from the index (issue 17)

An ancestor shared by many assets (a schema of 500 tables) is one row per asset; a tree page
names it by its first visible row by id. `ix_knowledge_nodes_path` (org_id, path) becomes
(org_id, path, id), so that row is the first the index yields (a LIMIT 1 walk, not a sort of
every copy). Same columns first: every other use of the index keeps it. Only an index: a database
migrated down past it reads the same.

Revision ID: 0016
Revises: 0015
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_knowledge_nodes_path", table_name="knowledge_nodes")
    op.create_index("ix_knowledge_nodes_path", "knowledge_nodes", ["org_id", "path", "id"])


def downgrade() -> None:
    op.drop_index("ix_knowledge_nodes_path", table_name="knowledge_nodes")
    op.create_index("ix_knowledge_nodes_path", "knowledge_nodes", ["org_id", "path"])
