"""vectors_in_row: an item's vector, lexemes and text kept in its row, not in TOAST

pgvector declares `vector` with EXTERNAL storage, and PostgreSQL moves values out of a row into
the table's TOAST relation once the row passes ~2 kB (TOAST_TUPLE_THRESHOLD), largest first: a
384-dimension vector is 1,544 bytes, so the vector of nearly every episode, memory and chunk
lived out of line. Every statement that computes a distance from the table then pays a TOAST
fetch per row (an index probe and a page of the TOAST relation): the exact vector search reads
every visible row's vector, the fusion pool's statements ~200. Measured at bench/speed/scale's
20k org (2,565 visible turns, 1,624 memories; `python -m bench.speed.growth.stages --scale
memscale_bench_scale_hash --org scale-0001`, docs/search.md "Vectors in the row"): the exact
pool's 15,264 buffer reads were 3,036 heap pages and ~12,000 TOAST reads.

`toast_tuple_target = 8160` (the most a heap page allows) on every table that holds item vectors
makes the toaster leave a row whole until it would not fit a page: the vector, the tsvector and
the text stay in the row, uncompressed; a long document chunk still has its text moved out first
(largest first), its vector stays. Setting the vector column to PLAIN instead was measured and
lost: with the vector pinned in the row, a typical row still passes 2 kB, so the toaster moves the
tsvector and the text out, and `length(tsv)` (read for every row the exact pool sorts) pays the
TOAST fetch instead.

A partitioned table has no storage of its own: the parameter is set on each leaf partition
(whatever their number: `keep_whole` is also what bench/speed/scale's layout applies after a
rebuild with another partition count) and on `chunks`. Rows written before this migration keep
their storage until rewritten (`VACUUM FULL` of a partition, or pg_repack, moves their vectors
back into the row); the downgrade resets the parameter, and rows written meanwhile stay whole
until rewritten likewise. Nothing is read or written differently: only where the bytes lie.

Revision ID: 0035
Revises: 0034
"""

from alembic import op
from sqlalchemy import text

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None

TABLES = ("episodes", "memories", "chunks")
TARGET = 8160  # the largest toast_tuple_target PostgreSQL accepts (TOAST_TUPLE_TARGET_MAIN)


def leaves(conn, table: str) -> list[str]:
    """The tables that store `table`'s rows: its leaf partitions, or itself if not partitioned
    (`pg_partition_tree` lists nothing for a table outside any partition tree)."""
    found = conn.execute(
        text("SELECT p.relid::regclass::text FROM pg_partition_tree(CAST(:t AS regclass)) p WHERE p.isleaf ORDER BY 1"),
        {"t": table},
    ).scalars()
    return list(found) or [conn.execute(text("SELECT CAST(:t AS regclass)::text"), {"t": table}).scalar_one()]


def keep_whole(conn, reset: bool = False) -> None:
    """Rows of the item tables kept whole up to a page (or, `reset`, PostgreSQL's default again)."""
    for t in TABLES:
        for leaf in leaves(conn, t):
            change = "RESET (toast_tuple_target)" if reset else f"SET (toast_tuple_target = {TARGET})"
            conn.execute(text(f"ALTER TABLE {leaf} {change}"))


def upgrade() -> None:
    keep_whole(op.get_bind())


def downgrade() -> None:
    keep_whole(op.get_bind(), reset=True)
