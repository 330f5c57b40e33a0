"""feedback: what callers said of the items a retrieval handed out, and one vote per user, memory and signal

`feedback_events` holds each POST /v1/feedback with its retrieval (the reference cascades: the
feedback goes with the retrieval record, the user and the org). `feedback_votes` keeps at most one
vote per (memory, user, signal), the time of the latest one, from which a memory's utility is read
(app/feedback/service.py). Both keyed by org first (Citus-ready) under org-level row-level
security: every read names the retrieval or the memories the caller was already served.

Revision ID: 0025
Revises: 0024
"""

from alembic import op

from app.kit.tenancy.rls import ORG_POLICY, ROLE

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

EVENTS = """
CREATE TABLE feedback_events (
  org_id uuid NOT NULL,
  id uuid NOT NULL DEFAULT gen_random_uuid(),
  retrieval_id uuid NOT NULL,
  actor_id uuid NOT NULL,
  items jsonb NOT NULL,
  outcome text,
  at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT pk_feedback_events PRIMARY KEY (org_id, id),
  CONSTRAINT fk_feedback_events_org_id_orgs FOREIGN KEY (org_id) REFERENCES orgs (id) ON DELETE CASCADE,
  CONSTRAINT fk_feedback_events_org_id_retrieval_events FOREIGN KEY (org_id, retrieval_id)
    REFERENCES retrieval_events (org_id, id) ON DELETE CASCADE,
  CONSTRAINT fk_feedback_events_org_id_users FOREIGN KEY (org_id, actor_id) REFERENCES users (org_id, id) ON DELETE CASCADE
)"""

VOTES = """
CREATE TABLE feedback_votes (
  org_id uuid NOT NULL,
  memory_id uuid NOT NULL,
  signal text NOT NULL,
  actor_id uuid NOT NULL,
  at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT pk_feedback_votes PRIMARY KEY (org_id, memory_id, signal, actor_id),
  CONSTRAINT fk_feedback_votes_org_id_orgs FOREIGN KEY (org_id) REFERENCES orgs (id) ON DELETE CASCADE,
  CONSTRAINT fk_feedback_votes_org_id_users FOREIGN KEY (org_id, actor_id) REFERENCES users (org_id, id) ON DELETE CASCADE
)"""


def create(execute) -> None:
    """The tables, indexes, grants and policies (also used by bench/speed/scale's `global` layout,
    kept at 0014 with today's code)."""
    execute(EVENTS)
    execute("CREATE INDEX ix_feedback_events_retrieval ON feedback_events (org_id, retrieval_id)")
    execute("CREATE INDEX ix_feedback_events_actor ON feedback_events (org_id, actor_id)")
    execute(VOTES)
    execute("CREATE INDEX ix_feedback_votes_actor ON feedback_votes (org_id, actor_id)")
    for table, privileges in (
        ("feedback_events", "SELECT, INSERT, DELETE"),
        ("feedback_votes", "SELECT, INSERT, UPDATE, DELETE"),
    ):
        execute(f"GRANT {privileges} ON {table} TO {ROLE}")
        execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        execute(ORG_POLICY.format(t=table, role=ROLE))


def upgrade() -> None:
    create(op.execute)


def downgrade() -> None:
    op.execute("DROP TABLE feedback_votes")
    op.execute("DROP TABLE feedback_events")
