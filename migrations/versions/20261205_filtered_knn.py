"""filtered kNN for a caller in no group: a partial HNSW index over the org-visible rows
(episodes, memories, chunks)

Why: HNSW filters after its walk, so under the ACL the walk of the full graph passes every
private and group row of the org (and of the orgs sharing its partition) that the caller may not
see. A caller in no group sees the org-visible rows and its own: the vector stage takes the first
by an iterative walk of `ix_<table>_embedding_org_hnsw`, a graph of org-visible rows only, and
the second (a small set) by the exact search over the (org_id, owner_id) btree
(app/search/repository/vector.py `split_ids`). The full HNSW index stays: callers in groups, and
filters that leave the org-visible rows out, walk it. Figures: docs/scale-out.md.

Only an index: a database migrated down past this revision reads the same (the org part's walk
takes the full index).

Revision ID: 0026
Revises: 0025
"""

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

TABLES = ("episodes", "memories", "chunks")


def upgrade() -> None:
    for t in TABLES:  # on the partitioned tables each partition builds its own
        op.execute(
            f"CREATE INDEX ix_{t}_embedding_org_hnsw ON {t} USING hnsw (embedding vector_cosine_ops)"
            " WITH (m = 16, ef_construction = 64) WHERE visibility = 'org'"
        )


def downgrade() -> None:
    for t in TABLES:
        op.execute(f"DROP INDEX ix_{t}_embedding_org_hnsw")
