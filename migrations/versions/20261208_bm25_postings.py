"""bm25_postings: which rows hold each lexeme, per visibility bucket, kept by 0024's triggers

The text top-n read every visible row holding a query lexeme from its item table (found by the
GIN index, `bm25_hits_<type>`), to test `tsv @@` per lexeme and sum the idf: thousands of heap
rows per ranking in a large org. `bm25_postings` holds one row per (org, bucket, lexeme, item
id) of every row the statistics count (main branch, served by default), so a caller's top n is
an aggregate over the index of their visible buckets' postings of the query's lexemes: no item
row read. Buckets are named by a small integer (`bm25_bucket_ids`: one per org, item type and
bucket text), so that a posting is (org, bucket id, lexeme, id).

0024's statement triggers keep them in the same statement as the other statistics: the rows a
statement added and took away (`src`), netted per (org, bucket, lexeme, id), are inserted (+1)
or deleted (-1); a new bucket's id is taken first. A shared row is also posted in its owner's
copy of its bucket (`OWNER_COPY`), so that an owner finds their own rows in buckets they cannot
see (a group they are not in) in the postings too, not in the item table. Org-level RLS, read-only for the service
role, as 0024's tables; the triggers write as the functions' owner.

Revision ID: 0033
Revises: 0032
"""

import importlib.util
from pathlib import Path

from alembic import op

from app.kit.tenancy.rls import ORG_POLICY, ROLE

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def _stats():
    """Migration 0024's module: its bucket expression, row selection and upsert, reused as they are."""
    spec = importlib.util.spec_from_file_location("bm25_stats_0024", Path(__file__).with_name("20261205_bm25_stats.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


S = _stats()

TABLES = [
    """CREATE TABLE bm25_bucket_ids (
  org_id uuid NOT NULL, item_type text NOT NULL, bucket text NOT NULL, bid integer GENERATED ALWAYS AS IDENTITY,
  CONSTRAINT pk_bm25_bucket_ids PRIMARY KEY (org_id, item_type, bucket),
  CONSTRAINT uq_bm25_bucket_ids_bid UNIQUE (org_id, bid))""",
    """CREATE TABLE bm25_postings (
  org_id uuid NOT NULL, bid integer NOT NULL, lexeme text NOT NULL, id uuid NOT NULL,
  CONSTRAINT pk_bm25_postings PRIMARY KEY (org_id, bid, lexeme, id))""",
]


# A shared row is posted twice: in its bucket, and in its owner's copy of that bucket
# ('w:<owner>|<bucket>'), which no bucket rule makes visible: the owner reads the copies of the
# buckets they cannot see (a group they are not in, a label they are not cleared for).
OWNER_COPY = "'w:' || owner_id::text || '|' || "


def _new_buckets(type_: str, served: str) -> str:
    """An id for each bucket (and owner's copy) the statement's new rows fall in that has none yet."""
    rows = f"FROM new_rows WHERE branch_id IS NULL AND {served}"
    return f"""
    INSERT INTO bm25_bucket_ids (org_id, item_type, bucket)
      SELECT DISTINCT org_id, '{type_}', bucket FROM (SELECT org_id, {S.BUCKET} AS bucket {rows}
        UNION ALL SELECT org_id, {OWNER_COPY}{S.BUCKET} {rows} AND visibility <> 'private') x
      WHERE NOT EXISTS (SELECT 1 FROM bm25_bucket_ids i
        WHERE i.org_id = x.org_id AND i.item_type = '{type_}' AND i.bucket = x.bucket)
      ORDER BY 1, 3 ON CONFLICT DO NOTHING;"""


def _postings(type_: str) -> str:
    """Data-modifying CTEs over 0024's `src`: each (org, bucket, lexeme, id) netted; +1 inserted, -1 deleted."""
    both = (
        "SELECT org_id, id, bucket, tsv, s FROM src UNION ALL "
        f"SELECT org_id, id, {OWNER_COPY}bucket, tsv, s FROM src WHERE visibility <> 'private'"
    )
    return f"""pc AS MATERIALIZED (SELECT x.org_id, i.bid, lex, x.id, sum(s) AS s
      FROM ({both}) x JOIN bm25_bucket_ids i ON i.org_id = x.org_id AND i.item_type = '{type_}' AND i.bucket = x.bucket,
        unnest(tsvector_to_array(tsv)) lex GROUP BY 1, 2, 3, 4 HAVING sum(s) <> 0),
    pd AS (DELETE FROM bm25_postings t USING pc WHERE pc.s < 0 AND t.org_id = pc.org_id AND t.bid = pc.bid
      AND t.lexeme = pc.lex AND t.id = pc.id),
    pi AS (INSERT INTO bm25_postings (org_id, bid, lexeme, id) SELECT org_id, bid, lex, id FROM pc WHERE s > 0
      ORDER BY 1, 2, 3, 4),
    b AS (INSERT INTO bm25_buckets"""


def _apply(op_: str, type_: str, served: str) -> str:
    keep = S._apply(op_, type_, served).replace("b AS (INSERT INTO bm25_buckets", _postings(type_), 1)
    return (_new_buckets(type_, served) if op_ != "DELETE" else "") + keep


def _function(type_: str, served: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION bm25_keep_{type_}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $f$
BEGIN
  IF TG_OP = 'INSERT' THEN {_apply("INSERT", type_, served)}
  ELSIF TG_OP = 'UPDATE' THEN {_apply("UPDATE", type_, served)}
  ELSE {_apply("DELETE", type_, served)}
  END IF;
  RETURN NULL;
END $f$"""


def _backfill(type_: str, table: str, served: str) -> list[str]:
    where = f"FROM {table} WHERE branch_id IS NULL AND {served}"
    rows = (
        f"SELECT org_id, id, {S.BUCKET} AS bucket, tsv {where} UNION ALL "
        f"SELECT org_id, id, {OWNER_COPY}{S.BUCKET}, tsv {where} AND visibility <> 'private'"
    )
    return [
        f"""INSERT INTO bm25_bucket_ids (org_id, item_type, bucket)
              SELECT DISTINCT org_id, '{type_}', bucket FROM ({rows}) x ORDER BY 1, 3""",
        f"""INSERT INTO bm25_postings SELECT x.org_id, i.bid, lex, x.id
              FROM ({rows}) x JOIN bm25_bucket_ids i ON i.org_id = x.org_id AND i.item_type = '{type_}' AND i.bucket = x.bucket,
                unnest(tsvector_to_array(x.tsv)) lex""",
    ]


def upgrade() -> None:
    for ddl in TABLES:
        op.execute(ddl)
    for t in ("bm25_bucket_ids", "bm25_postings"):
        op.execute(f"GRANT SELECT ON {t} TO {ROLE}")
        op.execute(f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY")
        op.execute(ORG_POLICY.format(t=t, role=ROLE))
    for type_, (table, served) in S.TYPES.items():
        op.execute(_function(type_, served))
        for sql in _backfill(type_, table, served):
            op.execute(sql)


def downgrade() -> None:
    for type_, (_, served) in S.TYPES.items():
        op.execute(S._function(type_, served).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    op.execute("DROP TABLE bm25_postings, bm25_bucket_ids")
