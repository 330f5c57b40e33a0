"""workers may serve some orgs only

`memscale worker --org ACME` claims only ACME's jobs: a tenant with heavy pipelines gets its own
worker without starving the others (and a test's worker never takes another test's jobs).
The claim function gains an optional org filter (NULL = every org).

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

CLAIM = """
CREATE FUNCTION memscale_claim_job(p_worker text, p_lease_s int, p_kinds text[]{extra_arg})
  RETURNS TABLE(id uuid, org_id uuid, kind text)
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public AS $$
  UPDATE jobs SET status = 'running', locked_by = p_worker, attempts = jobs.attempts + 1,
         locked_until = now() + make_interval(secs => p_lease_s), started_at = coalesce(jobs.started_at, now())
   WHERE jobs.id = (SELECT j.id FROM jobs j
                     WHERE j.kind = ANY(p_kinds){extra_cond}
                       AND (j.status = 'queued' OR (j.status = 'running' AND j.locked_until < now()))
                     ORDER BY j.created_at FOR UPDATE SKIP LOCKED LIMIT 1)
  RETURNING jobs.id, jobs.org_id, jobs.kind $$"""


def _swap(drop: str, create: str, grant: str) -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {drop}")
    op.execute(create)
    op.execute(f"REVOKE ALL ON FUNCTION {grant} FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {grant} TO memscale_app")


def upgrade() -> None:
    _swap(
        "memscale_claim_job(text, int, text[])",
        CLAIM.format(
            extra_arg=", p_orgs uuid[] DEFAULT NULL",
            extra_cond="\n                       AND (p_orgs IS NULL OR j.org_id = ANY(p_orgs))",
        ),
        "memscale_claim_job(text, int, text[], uuid[])",
    )


def downgrade() -> None:
    _swap(
        "memscale_claim_job(text, int, text[], uuid[])",
        CLAIM.format(extra_arg="", extra_cond=""),
        "memscale_claim_job(text, int, text[])",
    )
