"""jobs can be cancelled; workers claim fairly across orgs

Issue 41: a steward's long job held the shared worker while another org's job stayed queued,
and nothing could stop it.

- `jobs.status` gains `cancelled` (`POST /v1/jobs/{id}/cancel`): a cancelled job is never
  claimed again, and a running one stops at its next checkpoint (app/jobs/runner.py).
- `memscale_claim_job` orders the claimable jobs by (1) how many jobs their org is running now
  (live leases), (2) when the org last had a job started (never first: the org served least
  recently goes next), (3) age. A free worker therefore takes another org's queued job before the
  next job of an org that already holds one, and even a single worker alternates between orgs
  instead of draining one org's backlog first. `ix_jobs_org_started` keeps (2) an index probe.

Revision ID: 0022
Revises: 0021
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

SIGNATURE = "memscale_claim_job(text, int, text[], uuid[])"

CLAIMABLE = (
    "{t}.kind = ANY(p_kinds) AND (p_orgs IS NULL OR {t}.org_id = ANY(p_orgs)) "
    "AND ({t}.status = 'queued' OR ({t}.status = 'running' AND {t}.locked_until < now()))"
)

# Each org's load is computed once per claim (not once per queued job): its running jobs (live
# leases) and when it was last served; then the claimable job of the least loaded, least
# recently served org, oldest first, skipping jobs another worker is claiming right now.
FAIR = f"""
CREATE FUNCTION memscale_claim_job(p_worker text, p_lease_s int, p_kinds text[], p_orgs uuid[] DEFAULT NULL)
  RETURNS TABLE(id uuid, org_id uuid, kind text)
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public AS $$
  UPDATE jobs SET status = 'running', locked_by = p_worker, attempts = jobs.attempts + 1,
         locked_until = now() + make_interval(secs => p_lease_s), started_at = coalesce(jobs.started_at, now())
   WHERE jobs.id = (
     WITH load AS MATERIALIZED (  -- once per org, not once per queued job (the planner would inline it)
       SELECT o.org_id,
              (SELECT count(*) FROM jobs r WHERE r.org_id = o.org_id AND r.status = 'running'
                  AND r.locked_until >= now()) AS running,
              (SELECT max(s.started_at) FROM jobs s WHERE s.org_id = o.org_id) AS served
         FROM (SELECT DISTINCT c.org_id FROM jobs c WHERE {CLAIMABLE.format(t="c")}) o)
     SELECT j.id FROM jobs j JOIN load ON load.org_id = j.org_id
      WHERE {CLAIMABLE.format(t="j")}
      ORDER BY load.running, load.served NULLS FIRST, j.created_at
      FOR UPDATE OF j SKIP LOCKED LIMIT 1)
  RETURNING jobs.id, jobs.org_id, jobs.kind $$"""

# Revision 0007's function (oldest first), for the downgrade.
OLDEST_FIRST = f"""
CREATE FUNCTION memscale_claim_job(p_worker text, p_lease_s int, p_kinds text[], p_orgs uuid[] DEFAULT NULL)
  RETURNS TABLE(id uuid, org_id uuid, kind text)
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public AS $$
  UPDATE jobs SET status = 'running', locked_by = p_worker, attempts = jobs.attempts + 1,
         locked_until = now() + make_interval(secs => p_lease_s), started_at = coalesce(jobs.started_at, now())
   WHERE jobs.id = (SELECT j.id FROM jobs j WHERE {CLAIMABLE.format(t="j")}
                     ORDER BY j.created_at FOR UPDATE SKIP LOCKED LIMIT 1)
  RETURNING jobs.id, jobs.org_id, jobs.kind $$"""


def _swap(create: str) -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}")
    op.execute(create)
    op.execute(f"REVOKE ALL ON FUNCTION {SIGNATURE} FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {SIGNATURE} TO memscale_app")


def _status(allowed: str) -> None:
    op.execute(f"ALTER TABLE jobs DROP CONSTRAINT ck_jobs_status, ADD CONSTRAINT ck_jobs_status CHECK (status IN ({allowed}))")


def upgrade() -> None:
    _status("'queued','running','succeeded','failed','cancelled'")
    op.create_index("ix_jobs_org_started", "jobs", ["org_id", "started_at"], unique=False)
    _swap(FAIR)


def downgrade() -> None:
    _swap(OLDEST_FIRST)
    op.drop_index("ix_jobs_org_started", table_name="jobs")
    op.execute("UPDATE jobs SET status = 'failed', error = coalesce(error, 'cancelled') WHERE status = 'cancelled'")
    _status("'queued','running','succeeded','failed'")
