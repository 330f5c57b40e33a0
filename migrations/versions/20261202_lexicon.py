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

from alembic import op

from app.kit.tenancy.rls import ORG_POLICY, ROLE

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

TABLE = """
CREATE TABLE lexicon (
  org_id uuid NOT NULL,
  lexeme text NOT NULL,
  word text NOT NULL,
  embedding vector(384) NOT NULL,
  CONSTRAINT pk_lexicon PRIMARY KEY (org_id, lexeme),
  CONSTRAINT fk_lexicon_org_id_orgs FOREIGN KEY (org_id) REFERENCES orgs (id) ON DELETE CASCADE
)"""


def create(execute) -> None:
    """The table, its index, grants and policy (also used by bench/scale's `global` layout, kept
    at 0014 with today's code)."""
    execute(TABLE)
    execute("CREATE INDEX ix_lexicon_org_id ON lexicon (org_id)")
    execute(f"GRANT SELECT, INSERT, DELETE ON lexicon TO {ROLE}")
    execute("ALTER TABLE lexicon ENABLE ROW LEVEL SECURITY")
    execute(ORG_POLICY.format(t="lexicon", role=ROLE))


def upgrade() -> None:
    create(op.execute)


def downgrade() -> None:
    op.execute("DROP TABLE lexicon")
