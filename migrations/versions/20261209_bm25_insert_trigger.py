"""bm25_insert_trigger: an INSERT statement's statistics and postings kept without netting

0033's trigger functions run one statement shape for every operation: the rows a statement added
(+1) and took away (-1), netted per key (`GROUP BY ... HAVING sum(s) <> 0`), the postings' -1
deleted and +1 inserted. An INSERT statement takes nothing away, so its branch here keeps the
same rows without the netting:

- the postings are inserted straight from the join of the rows (and the owner's copies of shared
  rows) with their bucket ids and the rows' lexemes, sorted by the primary key, with no
  aggregate over every (bucket, lexeme, id) and no DELETE over them: a row's lexemes are
  distinct, a row's bucket and its owner's copy differ, and ids are unique per org, so no
  posting repeats within one statement or exists before it;
- N, total length, df and the owners' counts are plain counts (`count(*)`, every group > 0);
- the new bucket ids are looked up once per distinct bucket of the statement, not once per row:
  when every bucket already has an id this is the whole cost of that step.

Sorting the postings still pays: inserted in index order, consecutive keys land on the same
leaf pages (unsorted was slower in bench.speed.postings --ingest). UPDATE and DELETE keep 0033's
netted statements as they are (supersede, erasure, retention, declassify and branch merges
rely on them). What is stored is identical to 0033's triggers
(tests/test_bm25_insert_trigger.py); the downgrade restores 0033's functions.

Revision ID: 0034
Revises: 0033
"""

import importlib.util
from pathlib import Path

from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None


def _postings():
    """Migration 0033's module (and through it 0024's): its functions, bucket expression and
    owner's copy, reused as they are."""
    spec = importlib.util.spec_from_file_location("bm25_postings_0033", Path(__file__).with_name("20261208_bm25_postings.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


P = _postings()
S = P.S
SHARD = f"(pg_backend_pid() % {S.SHARDS})::smallint"


def _new_buckets(type_: str, served: str) -> str:
    """0033's new bucket ids, the distinct buckets taken before the lookup: the same ids in the
    same order, one index probe per bucket instead of per row."""
    rows = f"FROM new_rows WHERE branch_id IS NULL AND {served}"
    return f"""
    INSERT INTO bm25_bucket_ids (org_id, item_type, bucket)
      SELECT org_id, '{type_}', bucket FROM (SELECT DISTINCT org_id, bucket FROM (SELECT org_id, {S.BUCKET} AS bucket {rows}
        UNION ALL SELECT org_id, {P.OWNER_COPY}{S.BUCKET} {rows} AND visibility <> 'private') y) x
      WHERE NOT EXISTS (SELECT 1 FROM bm25_bucket_ids i
        WHERE i.org_id = x.org_id AND i.item_type = '{type_}' AND i.bucket = x.bucket)
      ORDER BY 1, 3 ON CONFLICT DO NOTHING;"""


def _insert(type_: str, served: str) -> str:
    """The INSERT branch: the statement's counted rows added to every kept table, no netting."""
    src = (
        f"SELECT org_id, id, {S.BUCKET} AS bucket, owner_id, visibility, groups, labels, tsv "
        f"FROM new_rows WHERE branch_id IS NULL AND {served}"
    )
    both = (
        "SELECT org_id, id, bucket, tsv FROM src UNION ALL "
        f"SELECT org_id, id, {P.OWNER_COPY}bucket, tsv FROM src WHERE visibility <> 'private'"
    )
    return (
        _new_buckets(type_, served)
        + f"""
    WITH src AS MATERIALIZED ({src}),
    pi AS (INSERT INTO bm25_postings (org_id, bid, lexeme, id)
      SELECT x.org_id, i.bid, lex, x.id
      FROM ({both}) x JOIN bm25_bucket_ids i ON i.org_id = x.org_id AND i.item_type = '{type_}' AND i.bucket = x.bucket,
        unnest(tsvector_to_array(x.tsv)) lex ORDER BY 1, 2, 3, 4),
    b AS (INSERT INTO bm25_buckets AS t (org_id, item_type, bucket, shard, owner_id, visibility, groups, labels, n, total_len)
      SELECT org_id, '{type_}', bucket, {SHARD}, min(CASE WHEN visibility = 'private' THEN owner_id::text END)::uuid,
             min(visibility), min(groups), min(labels), count(*), sum(length(tsv))
      FROM src GROUP BY org_id, bucket ORDER BY org_id, bucket
      ON CONFLICT (org_id, item_type, bucket, shard)
      DO UPDATE SET n = t.n + excluded.n, total_len = t.total_len + excluded.total_len),
    d AS (INSERT INTO bm25_df AS t (org_id, item_type, bucket, lexeme, shard, df)
      SELECT org_id, '{type_}', bucket, lex, {SHARD}, count(*)
      FROM src, unnest(tsvector_to_array(tsv)) lex GROUP BY org_id, bucket, lex ORDER BY org_id, bucket, lex
      ON CONFLICT (org_id, item_type, bucket, lexeme, shard) DO UPDATE SET df = t.df + excluded.df)
    INSERT INTO bm25_owned AS t (org_id, item_type, owner_id, visibility, groups, labels, shard, n)
      SELECT org_id, '{type_}', owner_id, visibility, groups, labels, {SHARD}, count(*)
      FROM src WHERE visibility <> 'private' GROUP BY org_id, owner_id, visibility, groups, labels
      ORDER BY org_id, owner_id, visibility, groups, labels
      ON CONFLICT (org_id, item_type, owner_id, visibility, groups, labels, shard) DO UPDATE SET n = t.n + excluded.n;"""
    )


def _function(type_: str, served: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION bm25_keep_{type_}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $f$
BEGIN
  IF TG_OP = 'INSERT' THEN {_insert(type_, served)}
  ELSIF TG_OP = 'UPDATE' THEN {P._apply("UPDATE", type_, served)}
  ELSE {P._apply("DELETE", type_, served)}
  END IF;
  RETURN NULL;
END $f$"""


def upgrade() -> None:
    for type_, (_, served) in S.TYPES.items():
        op.execute(_function(type_, served))


def downgrade() -> None:
    for type_, (_, served) in S.TYPES.items():
        op.execute(P._function(type_, served))
