"""row-level security's setting readers are PARALLEL SAFE: RLS-protected reads may use parallel workers

The policies call memscale_org(), memscale_user(), memscale_groups(), memscale_clearances(),
memscale_all_scopes(), memscale_branch() and memscale_branches(), SQL functions that only read
the transaction's `memscale.*` settings. Declared without a parallel label they were PARALLEL
UNSAFE, and one unsafe function anywhere in a statement keeps the whole statement on one
process: no read of a tenant table could ever use a parallel plan. Parallel workers receive the
leader's settings (SET LOCAL included), so the functions return in a worker what they return in
the leader; tests/test_schema.py checks that a read forced onto workers
(`debug_parallel_query`) returns exactly the caller's rows. Only function labels: a database
migrated down past this revision reads the same rows, serially.

Revision ID: 0020
Revises: 0019
"""

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

FUNCTIONS = (
    "memscale_org()",
    "memscale_user()",
    "memscale_groups()",
    "memscale_clearances()",
    "memscale_all_scopes()",
    "memscale_branch()",
    "memscale_branches()",
)


def upgrade() -> None:
    for f in FUNCTIONS:
        op.execute(f"ALTER FUNCTION {f} PARALLEL SAFE")


def downgrade() -> None:
    for f in FUNCTIONS:
        op.execute(f"ALTER FUNCTION {f} PARALLEL UNSAFE")
