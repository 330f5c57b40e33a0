"""memory manager: each store / merge / supersede / drop decision with its features, and the learned policies

`manager_decisions` records what distillation and consolidation decided about each candidate
memory, on which features, by which policy (app/manager/); `manager_policies` holds one row per
trained version of an org's learned policy (weights, held-out metrics, the count and hash of the
decisions it was trained on). Both keyed by org first (Citus-ready), under org-level row-level
security, erased with the org (cascade) and a decision with its memory's owner (the reference to
users cascades; app/erasure/service.py deletes them when the user is forgotten).

Revision ID: 0029
Revises: 0027
"""

from alembic import op

from app.kit.tenancy.rls import ORG_POLICY, ROLE

revision = "0029"
down_revision = "0027"
branch_labels = None
depends_on = None

DECISIONS = """
CREATE TABLE manager_decisions (
  org_id uuid NOT NULL,
  id uuid NOT NULL DEFAULT gen_random_uuid(),
  stage text NOT NULL,
  action text NOT NULL,
  rules_action text NOT NULL,
  policy_version integer,
  features jsonb NOT NULL,
  memory_id uuid,
  neighbour_id uuid,
  source text NOT NULL,
  owner_id uuid,
  job_id uuid,
  at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT pk_manager_decisions PRIMARY KEY (org_id, id),
  CONSTRAINT fk_manager_decisions_org_id_orgs FOREIGN KEY (org_id) REFERENCES orgs (id) ON DELETE CASCADE,
  CONSTRAINT fk_manager_decisions_org_id_users FOREIGN KEY (org_id, owner_id) REFERENCES users (org_id, id) ON DELETE CASCADE
)"""

POLICIES = """
CREATE TABLE manager_policies (
  org_id uuid NOT NULL,
  id uuid NOT NULL DEFAULT gen_random_uuid(),
  version integer NOT NULL,
  status text NOT NULL,
  weights jsonb NOT NULL,
  metrics jsonb NOT NULL,
  training jsonb NOT NULL,
  created_by uuid,
  job_id uuid,
  at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT pk_manager_policies PRIMARY KEY (org_id, id),
  CONSTRAINT uq_manager_policies_org_id_version UNIQUE (org_id, version),
  CONSTRAINT fk_manager_policies_org_id_orgs FOREIGN KEY (org_id) REFERENCES orgs (id) ON DELETE CASCADE
)"""


def upgrade() -> None:
    op.execute(DECISIONS)
    op.execute("CREATE INDEX ix_manager_decisions_at ON manager_decisions (org_id, at)")
    op.execute("CREATE INDEX ix_manager_decisions_owner ON manager_decisions (org_id, owner_id)")
    op.execute(POLICIES)
    for table, privileges in (
        ("manager_decisions", "SELECT, INSERT, DELETE"),
        ("manager_policies", "SELECT, INSERT, UPDATE, DELETE"),
    ):
        op.execute(f"GRANT {privileges} ON {table} TO {ROLE}")
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(ORG_POLICY.format(t=table, role=ROLE))


def downgrade() -> None:
    op.execute("DROP TABLE manager_policies")
    op.execute("DROP TABLE manager_decisions")
