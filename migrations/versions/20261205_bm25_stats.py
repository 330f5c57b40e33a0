"""bm25_stats: BM25's N, total length and per-lexeme df kept per visibility bucket, by triggers

A caller's BM25 statistics were counted at every search over every row they may see that holds a
query word. They are now kept per visibility bucket, in the same transaction as every write:
a bucket is one user's private rows (`u:<owner>`), the org-visible rows of one label set
(`o:<labels>`), or the rows shared with one group set under one label set (`g:<groups>|<labels>`),
per org and item type, counting only rows served by default (main branch; memories `active`;
episodes not `quarantined`). A caller's N and df are sums over the buckets `visible_to` lets them
see (app/search/repository/bm25_stats.py). `bm25_owned` counts each owner's shared rows per
shape: an owner always sees their own rows, also those of a group they left or under a label
they are not cleared for, which no shared bucket gives them; such a caller takes the exact path.

Statement-level AFTER triggers with transition tables on the (partitioned) parents cover every
write path (API, batch, COPY, pipelines, versions, supersede, delete, narrowing, erasure,
retention, branch writes): one set-based upsert per statement, keys in order (no deadlock
between two writers' statements), an update's unchanged rows skipped. Each row is split over
`shard` = backend pid mod 4, so concurrent writers of one org rarely wait on the same counter.
The functions are SECURITY DEFINER: a write of the service role (under row-level security)
keeps statistics it may not read. Rows at zero stay (they add nothing). `bm25_hits_<type>`: the
ids of the caller's servable rows holding a lexeme, by the text index (see `_hits`).

Revision ID: 0024
Revises: 0022
"""

from alembic import op

from app.kit.tenancy.rls import ORG_POLICY, ROLE

revision = "0024"
down_revision = "0022"
branch_labels = None
depends_on = None

SHARDS = 4
# item type -> (table, what a main-branch row also needs to be served by default)
TYPES = {
    "memory": ("memories", "status = 'active'"),
    "episode": ("episodes", "quality IS DISTINCT FROM 'quarantined'"),
    "chunk": ("chunks", "true"),
}

TABLES = [
    """CREATE TABLE bm25_buckets (
  org_id uuid NOT NULL, item_type text NOT NULL, bucket text NOT NULL, shard smallint NOT NULL,
  owner_id uuid, visibility text NOT NULL, groups text[] NOT NULL, labels text[] NOT NULL,
  n bigint NOT NULL, total_len bigint NOT NULL,
  CONSTRAINT pk_bm25_buckets PRIMARY KEY (org_id, item_type, bucket, shard))""",
    """CREATE TABLE bm25_df (
  org_id uuid NOT NULL, item_type text NOT NULL, bucket text NOT NULL, lexeme text NOT NULL,
  shard smallint NOT NULL, df bigint NOT NULL,
  CONSTRAINT pk_bm25_df PRIMARY KEY (org_id, item_type, bucket, lexeme, shard))""",
    """CREATE TABLE bm25_owned (
  org_id uuid NOT NULL, item_type text NOT NULL, owner_id uuid NOT NULL, visibility text NOT NULL,
  groups text[] NOT NULL, labels text[] NOT NULL, shard smallint NOT NULL, n bigint NOT NULL,
  CONSTRAINT pk_bm25_owned PRIMARY KEY (org_id, item_type, owner_id, visibility, groups, labels, shard))""",
]

BUCKET = (
    "CASE WHEN visibility = 'private' THEN 'u:' || owner_id::text WHEN visibility = 'org' THEN 'o:' || labels::text "
    "ELSE 'g:' || groups::text || '|' || labels::text END"
)


def _src(op_: str, served: str) -> str:
    """The rows a statement added (+1) and took away (-1) from the statistics: of an update, only
    the rows whose bucket, tsvector or served state changed."""
    cols = f"org_id, id, {BUCKET} AS bucket, owner_id, visibility, groups, labels, tsv"
    where = f"branch_id IS NULL AND {served}"
    new = f"SELECT {cols} FROM new_rows WHERE {where}"
    old = f"SELECT {cols} FROM old_rows WHERE {where}"
    if op_ == "INSERT":
        return f"SELECT *, 1 AS s FROM ({new}) x"
    if op_ == "DELETE":
        return f"SELECT *, -1 AS s FROM ({old}) x"
    same = (
        "y.org_id = x.org_id AND y.id = x.id AND (y.bucket, y.owner_id, y.visibility, y.groups, y.labels, y.tsv) "
        "IS NOT DISTINCT FROM (x.bucket, x.owner_id, x.visibility, x.groups, x.labels, x.tsv)"
    )
    return (
        f"SELECT *, -1 AS s FROM ({old}) x WHERE NOT EXISTS (SELECT 1 FROM ({new}) y WHERE {same}) UNION ALL "
        f"SELECT *, 1 AS s FROM ({new}) x WHERE NOT EXISTS (SELECT 1 FROM ({old}) y WHERE {same})"
    )


def _apply(op_: str, type_: str, served: str) -> str:
    """One statement: the bucket counts, the df of each lexeme and the owners' shared rows,
    upserted in key order."""
    return f"""
    WITH src AS MATERIALIZED ({_src(op_, served)}),
    b AS (INSERT INTO bm25_buckets AS t (org_id, item_type, bucket, shard, owner_id, visibility, groups, labels, n, total_len)
      SELECT org_id, '{type_}', bucket, sh, min(CASE WHEN visibility = 'private' THEN owner_id::text END)::uuid,
             min(visibility), min(groups), min(labels), sum(s), sum(s * length(tsv))
      FROM src, (SELECT (pg_backend_pid() % {SHARDS})::smallint AS sh) p GROUP BY org_id, bucket, sh
      HAVING sum(s) <> 0 OR sum(s * length(tsv)) <> 0 ORDER BY org_id, bucket
      ON CONFLICT (org_id, item_type, bucket, shard)
      DO UPDATE SET n = t.n + excluded.n, total_len = t.total_len + excluded.total_len),
    d AS (INSERT INTO bm25_df AS t (org_id, item_type, bucket, lexeme, shard, df)
      SELECT org_id, '{type_}', bucket, lex, (pg_backend_pid() % {SHARDS})::smallint, sum(s)
      FROM src, unnest(tsvector_to_array(tsv)) lex GROUP BY org_id, bucket, lex HAVING sum(s) <> 0 ORDER BY org_id, bucket, lex
      ON CONFLICT (org_id, item_type, bucket, lexeme, shard) DO UPDATE SET df = t.df + excluded.df)
    INSERT INTO bm25_owned AS t (org_id, item_type, owner_id, visibility, groups, labels, shard, n)
      SELECT org_id, '{type_}', owner_id, visibility, groups, labels, (pg_backend_pid() % {SHARDS})::smallint, sum(s)
      FROM src WHERE visibility <> 'private' GROUP BY org_id, owner_id, visibility, groups, labels HAVING sum(s) <> 0
      ORDER BY org_id, owner_id, visibility, groups, labels
      ON CONFLICT (org_id, item_type, owner_id, visibility, groups, labels, shard) DO UPDATE SET n = t.n + excluded.n;"""


def _function(type_: str, served: str) -> str:
    return f"""
CREATE FUNCTION bm25_keep_{type_}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $f$
BEGIN
  IF TG_OP = 'INSERT' THEN {_apply("INSERT", type_, served)}
  ELSIF TG_OP = 'UPDATE' THEN {_apply("UPDATE", type_, served)}
  ELSE {_apply("DELETE", type_, served)}
  END IF;
  RETURN NULL;
END $f$"""


def _hits(type_: str, table: str, served: str) -> str:
    """The ids of the caller's servable main rows holding any lexeme of `q`, found by the text
    index: under row-level security the planner may not use it (`@@` is not leakproof, so it may
    not run before the policy's quals), so this function applies the policy's own rule (the
    caller's settings, as `tenant_access`) as the table's owner. Ids only; the caller's statement
    joins them back under `visible_to` and RLS."""
    return f"""
CREATE FUNCTION bm25_hits_{type_}(q tsquery) RETURNS TABLE (id uuid) LANGUAGE sql STABLE SECURITY DEFINER
  SET search_path = public AS $f$
  SELECT id FROM {table} WHERE org_id = (SELECT memscale_org()) AND tsv @@ q AND branch_id IS NULL AND {served}
    AND ((SELECT memscale_all_scopes()) OR owner_id = (SELECT memscale_user())
         OR ((visibility = 'org' OR (visibility = 'group' AND groups && (SELECT memscale_groups())))
             AND labels <@ (SELECT memscale_clearances())))
$f$"""


def _backfill(type_: str, table: str, served: str) -> list[str]:
    rows = (
        f"SELECT org_id, {BUCKET} AS bucket, owner_id, visibility, groups, labels, tsv FROM {table} "
        f"WHERE branch_id IS NULL AND {served}"
    )
    return [
        f"""INSERT INTO bm25_buckets SELECT org_id, '{type_}', bucket, 0,
              min(CASE WHEN visibility = 'private' THEN owner_id::text END)::uuid, min(visibility), min(groups), min(labels),
              count(*), sum(length(tsv)) FROM ({rows}) x GROUP BY org_id, bucket""",
        f"""INSERT INTO bm25_df SELECT org_id, '{type_}', bucket, lex, 0, count(*)
              FROM ({rows}) x, unnest(tsvector_to_array(tsv)) lex GROUP BY org_id, bucket, lex""",
        f"""INSERT INTO bm25_owned SELECT org_id, '{type_}', owner_id, visibility, groups, labels, 0, count(*)
              FROM ({rows}) x WHERE visibility <> 'private' GROUP BY org_id, owner_id, visibility, groups, labels""",
    ]


def upgrade() -> None:
    for ddl in TABLES:
        op.execute(ddl)
    for t in ("bm25_buckets", "bm25_df", "bm25_owned"):
        op.execute(f"GRANT SELECT ON {t} TO {ROLE}")
        op.execute(f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY")
        op.execute(ORG_POLICY.format(t=t, role=ROLE))
    for type_, (table, served) in TYPES.items():
        op.execute(_function(type_, served))
        op.execute(_hits(type_, table, served))
        op.execute(f"REVOKE ALL ON FUNCTION bm25_hits_{type_}(tsquery) FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION bm25_hits_{type_}(tsquery) TO {ROLE}")
        op.execute(
            f"CREATE TRIGGER bm25_keep_ins AFTER INSERT ON {table} REFERENCING NEW TABLE AS new_rows "
            f"FOR EACH STATEMENT EXECUTE FUNCTION bm25_keep_{type_}()"
        )
        op.execute(
            f"CREATE TRIGGER bm25_keep_upd AFTER UPDATE ON {table} REFERENCING OLD TABLE AS old_rows "
            f"NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION bm25_keep_{type_}()"
        )
        op.execute(
            f"CREATE TRIGGER bm25_keep_del AFTER DELETE ON {table} REFERENCING OLD TABLE AS old_rows "
            f"FOR EACH STATEMENT EXECUTE FUNCTION bm25_keep_{type_}()"
        )
        for sql in _backfill(type_, table, served):
            op.execute(sql)


def downgrade() -> None:
    for type_, (table, _) in TYPES.items():
        for trg in ("bm25_keep_ins", "bm25_keep_upd", "bm25_keep_del"):
            op.execute(f"DROP TRIGGER {trg} ON {table}")
        op.execute(f"DROP FUNCTION bm25_keep_{type_}()")
        op.execute(f"DROP FUNCTION bm25_hits_{type_}(tsquery)")
    op.execute("DROP TABLE bm25_owned, bm25_df, bm25_buckets")
