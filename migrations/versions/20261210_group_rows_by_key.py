"""group_rows_by_key: a caller's group rows found by index under row-level security

`visible_to` tested a group row with `groups && <the caller's groups>`. Under row-level security
PostgreSQL lets only leakproof conditions of a query lead an index scan ahead of the policies,
and array overlap is not leakproof, so the group rows came from the `(org_id, groups, tsv)` GIN
index by org alone: every group row of the org, each fetched and then filtered. At
bench/speed/scale's 20k org the exact vector search fetched 6,045 rows for 2,565 visible ones
(4,207 group rows, ~850 in the caller's group). Cost followed the org's group rows, not the caller's.

The same test in a form that may lead: `groups[1] = ANY(<the caller's groups>)` (a subscript and
text equality: both leakproof) or, for the rows of more than one group, `cardinality(groups) > 1
AND groups && <the caller's groups>`. Two indexes serve it: `(org_id, (groups[1]))` over the group
rows, and `(org_id)` over the group rows of several groups (few; the overlap is tested on those
only). Equivalent to the overlap for every row, NULLs included (app/kit/tenancy/access.py;
tests/test_group_rows_by_key.py). The policies keep the overlap as they are.

Revision ID: 0036
Revises: 0035
"""

from alembic import op

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None

TABLES = ("episodes", "memories", "chunks")  # on the partitioned tables each partition builds its own


def upgrade() -> None:
    for t in TABLES:
        op.execute(f"CREATE INDEX ix_{t}_group_first ON {t} (org_id, (groups[1])) WHERE visibility = 'group'")
        op.execute(f"CREATE INDEX ix_{t}_group_more ON {t} (org_id) WHERE visibility = 'group' AND cardinality(groups) > 1")


def downgrade() -> None:
    for t in TABLES:
        op.execute(f"DROP INDEX ix_{t}_group_first")
        op.execute(f"DROP INDEX ix_{t}_group_more")
