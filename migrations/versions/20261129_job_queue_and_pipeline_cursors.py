"""job queue and pipeline cursors

Jobs become a Postgres-backed queue (lease columns; workers claim with FOR UPDATE SKIP LOCKED
through a SECURITY DEFINER function, since the service role sees one org at a time).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 10:19:23.408974
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from app.kit.tenancy.rls import protect

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pipeline_cursors",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("pipeline", sa.Text(), nullable=False),
        sa.Column("position", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_pipeline_cursors_org_id_orgs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("org_id", "pipeline", name=op.f("pk_pipeline_cursors")),
    )
    op.add_column("episodes", sa.Column("quality", sa.Text(), nullable=True))
    op.add_column("jobs", sa.Column("locked_by", sa.Text(), nullable=True))
    op.add_column("jobs", sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True))
    op.add_column("jobs", sa.Column("attempts", sa.Integer(), server_default="0", nullable=False))
    op.add_column("jobs", sa.Column("cursor", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False))
    op.add_column("jobs", sa.Column("schedule_slot", sa.Text(), nullable=True))
    op.create_index("ix_jobs_queue", "jobs", ["status", "created_at"], unique=False)
    op.create_index("ix_jobs_slot", "jobs", ["org_id", "kind", "schedule_slot"], unique=True)
    protect(op, "pipeline_cursors", access=False)
    op.execute("""
CREATE FUNCTION memscale_claim_job(p_worker text, p_lease_s int, p_kinds text[])
  RETURNS TABLE(id uuid, org_id uuid, kind text)
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public AS $$
  UPDATE jobs SET status = 'running', locked_by = p_worker, attempts = jobs.attempts + 1,
         locked_until = now() + make_interval(secs => p_lease_s), started_at = coalesce(jobs.started_at, now())
   WHERE jobs.id = (SELECT j.id FROM jobs j
                     WHERE j.kind = ANY(p_kinds)
                       AND (j.status = 'queued' OR (j.status = 'running' AND j.locked_until < now()))
                     ORDER BY j.created_at FOR UPDATE SKIP LOCKED LIMIT 1)
  RETURNING jobs.id, jobs.org_id, jobs.kind $$""")
    op.execute("""
CREATE FUNCTION memscale_org_schedules() RETURNS TABLE(id uuid, settings jsonb)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$ SELECT id, settings FROM orgs $$""")
    for fn in ("memscale_claim_job(text, int, text[])", "memscale_org_schedules()"):
        op.execute(f"REVOKE ALL ON FUNCTION {fn} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {fn} TO memscale_app")


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS memscale_org_schedules()")
    op.execute("DROP FUNCTION IF EXISTS memscale_claim_job(text, int, text[])")
    op.execute("DROP POLICY IF EXISTS tenant_org ON pipeline_cursors")
    op.drop_index("ix_jobs_slot", table_name="jobs")
    op.drop_index("ix_jobs_queue", table_name="jobs")
    op.drop_column("jobs", "schedule_slot")
    op.drop_column("jobs", "cursor")
    op.drop_column("jobs", "attempts")
    op.drop_column("jobs", "locked_until")
    op.drop_column("jobs", "locked_by")
    op.drop_column("episodes", "quality")
    op.drop_table("pipeline_cursors")
