"""bm25_hits_by_access: the text index answers org and access with the lexeme

`bm25_hits_<type>` (migration 0024) found a lexeme's rows by the GIN index on `tsv` alone, which
spans every org of the table's partition and every visibility: each row holding a query word was
read from the heap to test its org and whether the caller may see it. In an org whose words are
in thousands of rows, most of them another user's, that was nearly all of the text stage. The
function is now a union of disjoint parts, each found by an index that holds the access columns
with the text (`btree_gin`): the org-visible rows by `(org_id, tsv)` over `visibility = 'org'`,
the group rows by `(org_id, groups, tsv)` over `visibility = 'group'` (`groups &&` the caller's),
the caller's own other rows by the `(org_id, owner_id)` btree with the text index, and every row
of the org for an all-scopes caller; planned per call with the caller's values (see `_by_access`).
The same ids as before: the parts split the policy's rule.

Revision ID: 0030
Revises: 0029
"""

from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

# item type -> (table, what a main-branch row also needs to be served by default), as 0024's
TYPES = {
    "memory": ("memories", "status = 'active'"),
    "episode": ("episodes", "quality IS DISTINCT FROM 'quarantined'"),
    "chunk": ("chunks", "true"),
}
HEAD = "SECURITY DEFINER SET search_path = public AS $f$"


def _base(table: str, served: str) -> str:
    return f"SELECT id FROM {table} WHERE org_id = (SELECT memscale_org()) AND tsv @@ q AND branch_id IS NULL AND {served}"


def _by_access(type_: str, table: str, served: str) -> str:
    """The policy's rule split into disjoint parts, each found by its own index. Run with the
    caller's values as literals (a plan per call, ~1 ms): with the org and groups as parameters
    the planner guesses an average org and may read all of a large org's group rows by the
    `(org_id, visibility)` btree instead of the GIN index."""
    base = f"SELECT id FROM {table} WHERE org_id = %1$L::uuid AND tsv @@ %2$L::tsquery AND branch_id IS NULL AND {served}"
    org = "visibility = 'org' AND labels <@ %3$L::text[]"
    group = "visibility = 'group' AND groups && %4$L::text[] AND labels <@ %3$L::text[]"
    own = f"owner_id = %5$L::uuid AND ({org}) IS NOT TRUE AND ({group}) IS NOT TRUE"
    return f"""
CREATE OR REPLACE FUNCTION bm25_hits_{type_}(q tsquery) RETURNS TABLE (id uuid) LANGUAGE plpgsql STABLE {HEAD}
BEGIN
  IF memscale_all_scopes() IS TRUE THEN
    RETURN QUERY EXECUTE format($s${base}$s$, memscale_org(), q::text);
  ELSE
    RETURN QUERY EXECUTE format(
      $s${base} AND {org} UNION ALL {base} AND {group} UNION ALL {base} AND {own}$s$,
      memscale_org(), q::text, memscale_clearances(), memscale_groups(), memscale_user());
  END IF;
END
$f$"""


def _one_pass(type_: str, table: str, served: str) -> str:
    """0024's body."""
    return f"""
CREATE OR REPLACE FUNCTION bm25_hits_{type_}(q tsquery) RETURNS TABLE (id uuid) LANGUAGE sql STABLE {HEAD}
  {_base(table, served)}
    AND ((SELECT memscale_all_scopes()) OR owner_id = (SELECT memscale_user())
         OR ((visibility = 'org' OR (visibility = 'group' AND groups && (SELECT memscale_groups())))
             AND labels <@ (SELECT memscale_clearances())))
$f$"""


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    for type_, (table, served) in TYPES.items():  # on the partitioned tables each partition builds its own
        op.execute(f"CREATE INDEX ix_{table}_tsv_org ON {table} USING gin (org_id, tsv) WHERE visibility = 'org'")
        op.execute(f"CREATE INDEX ix_{table}_tsv_group ON {table} USING gin (org_id, groups, tsv) WHERE visibility = 'group'")
        op.execute(_by_access(type_, table, served))


def downgrade() -> None:
    for type_, (table, served) in TYPES.items():
        op.execute(_one_pass(type_, table, served))
        op.execute(f"DROP INDEX ix_{table}_tsv_org")
        op.execute(f"DROP INDEX ix_{table}_tsv_group")
    op.execute("DROP EXTENSION IF EXISTS btree_gin")
