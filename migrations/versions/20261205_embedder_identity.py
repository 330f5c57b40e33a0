"""embedder identity: which model made an org's vectors, its re-embedding in progress, staged vectors

`org_embedders` records per org the embedding model (its id) and dimension its vectors hold;
existing orgs get the configured model (`MEMSCALE_EMBEDDING_MODEL`, default
`local/all-minilm-l6-v2`), read when the migration runs. `reembeddings` holds an org's
re-embedding under way, `embedding_staging` the new model's vectors it has made so far, each
referencing its row (episode, memory version, chunk, vocabulary word) with ON DELETE CASCADE.
`memscale_embedder_mismatches` lists, for the start-up check,
the orgs whose model differs from the configured one. The service role may now set a vocabulary
word's embedding (the switch copies staged vectors in).

Revision ID: 0027
Revises: 0026
"""

import sqlalchemy as sa
from alembic import op

from app.kit.tenancy.rls import ORG_POLICY, ROLE

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

ORG_EMBEDDERS = """
CREATE TABLE org_embedders (
  org_id uuid NOT NULL,
  model text NOT NULL,
  dim integer NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT pk_org_embedders PRIMARY KEY (org_id),
  CONSTRAINT fk_org_embedders_org_id_orgs FOREIGN KEY (org_id) REFERENCES orgs (id) ON DELETE CASCADE
)"""

REEMBEDDINGS = """
CREATE TABLE reembeddings (
  org_id uuid NOT NULL,
  model text NOT NULL,
  dim integer NOT NULL,
  done bigint NOT NULL DEFAULT 0,
  total bigint NOT NULL DEFAULT 0,
  started_at timestamptz NOT NULL DEFAULT now(),
  job_id uuid,
  CONSTRAINT pk_reembeddings PRIMARY KEY (org_id),
  CONSTRAINT fk_reembeddings_org_id_orgs FOREIGN KEY (org_id) REFERENCES orgs (id) ON DELETE CASCADE
)"""

STAGING = """
CREATE TABLE embedding_staging (
  org_id uuid NOT NULL,
  item_type text NOT NULL,
  item_key text NOT NULL,
  episode_id uuid,
  memory_id uuid,
  chunk_id uuid,
  lexeme text,
  embedding vector(384) NOT NULL,
  CONSTRAINT pk_embedding_staging PRIMARY KEY (org_id, item_type, item_key),
  CONSTRAINT ck_embedding_staging_one_item CHECK (num_nonnulls(episode_id, memory_id, chunk_id, lexeme) = 1),
  CONSTRAINT fk_embedding_staging_org_id_orgs FOREIGN KEY (org_id) REFERENCES orgs (id) ON DELETE CASCADE,
  CONSTRAINT fk_embedding_staging_org_id_episodes FOREIGN KEY (org_id, episode_id)
    REFERENCES episodes (org_id, id) ON DELETE CASCADE,
  CONSTRAINT fk_embedding_staging_org_id_memories FOREIGN KEY (org_id, memory_id)
    REFERENCES memories (org_id, id) ON DELETE CASCADE,
  CONSTRAINT fk_embedding_staging_org_id_chunks FOREIGN KEY (org_id, chunk_id)
    REFERENCES chunks (org_id, id) ON DELETE CASCADE,
  CONSTRAINT fk_embedding_staging_org_id_lexicon FOREIGN KEY (org_id, lexeme)
    REFERENCES lexicon (org_id, lexeme) ON DELETE CASCADE
)"""


MISMATCHES = """
CREATE FUNCTION memscale_embedder_mismatches(p_model text)
  RETURNS TABLE(org_name text, model text, reembedding text)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS
  $$ SELECT o.name, e.model, r.model FROM org_embedders e JOIN orgs o ON o.id = e.org_id
     LEFT JOIN reembeddings r ON r.org_id = e.org_id WHERE e.model <> p_model ORDER BY o.name $$"""


def configured_model() -> tuple[str, int]:
    """The model this deployment is configured with: what the rows already stored hold."""
    from app.config import Settings

    s = Settings()
    return s.embedding_model, s.embedding_dim


def upgrade() -> None:
    op.execute(ORG_EMBEDDERS)
    op.execute(REEMBEDDINGS)
    op.execute(STAGING)
    for col in ("episode_id", "memory_id", "chunk_id", "lexeme"):
        name = col.removesuffix("_id")
        op.execute(f"CREATE INDEX ix_embedding_staging_{name} ON embedding_staging (org_id, {col}) WHERE {col} IS NOT NULL")
    for table, privileges in (
        ("org_embedders", "SELECT, INSERT, UPDATE"),
        ("reembeddings", "SELECT, INSERT, UPDATE, DELETE"),
        ("embedding_staging", "SELECT, INSERT, DELETE"),
    ):
        op.execute(f"GRANT {privileges} ON {table} TO {ROLE}")
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(ORG_POLICY.format(t=table, role=ROLE))
    op.execute(f"GRANT UPDATE (embedding) ON lexicon TO {ROLE}")
    # The start-up check reads every org's model without seeing any org's rows.
    op.execute(MISMATCHES)
    op.execute("REVOKE ALL ON FUNCTION memscale_embedder_mismatches(text) FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION memscale_embedder_mismatches(text) TO {ROLE}")
    model, dim = configured_model()
    op.get_bind().execute(
        sa.text("INSERT INTO org_embedders (org_id, model, dim) SELECT id, :m, :d FROM orgs"), {"m": model, "d": dim}
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION memscale_embedder_mismatches(text)")
    op.execute(f"REVOKE UPDATE (embedding) ON lexicon FROM {ROLE}")
    op.execute("DROP TABLE embedding_staging")
    op.execute("DROP TABLE reembeddings")
    op.execute("DROP TABLE org_embedders")
