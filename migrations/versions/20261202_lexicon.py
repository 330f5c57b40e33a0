"""lexicon: the org's vocabulary, one embedded word per lexeme its episodes hold (issue 13)

Hybrid ranking's vocabulary lift (app/search/lexicon.py) takes the words of the caller's
servable rows nearest to the query's embedding as extra, weighted BM25 terms. Primary key
(org_id, lexeme): Citus-ready (distributed by org). Org-level row-level security: the table is
only ever read joined with the lexemes of rows the caller may be served. Rows are written at
ingest; episodes stored before this revision have no words here until they are stored again
(the lift then finds fewer words, nothing else changes).

Revision ID: 0018
Revises: 0017
"""
import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import Vector

from app.kit.rls import protect

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lexicon",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("lexeme", sa.Text(), nullable=False),
        sa.Column("word", sa.Text(), nullable=False),
        sa.Column("embedding", Vector(384), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_lexicon_org_id_orgs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("org_id", "lexeme", name=op.f("pk_lexicon")),
    )
    op.create_index("ix_lexicon_org_id", "lexicon", ["org_id"])
    protect(op, "lexicon", access=False, privileges="SELECT, INSERT, DELETE")


def downgrade() -> None:
    op.execute("DROP POLICY IF EXISTS tenant_org ON lexicon")
    op.drop_table("lexicon")
