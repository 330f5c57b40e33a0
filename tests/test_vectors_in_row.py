"""Migration 0035: an item's vector, tsvector and text stay in its row (toast_tuple_target = 8160
on every table that stores item rows), so a distance or a lexeme count read from the table pays
no TOAST fetch. Without the migration a typical row (a vector and ~400 characters of text) has its
vector moved out of line: these tests fail there. The downgrade is run by tests/test_schema.py."""

from __future__ import annotations

import random

from sqlalchemy import text

from tests.test_bm25_stats import _setup, org_document

VEC = "array_fill(0.05::real, ARRAY[384])::vector"
IN_ROW = "pg_column_toast_chunk_id({col}) IS NULL"  # NULL: the value is not stored out of line


def _words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(n))


# The tables that store item rows: the partitions of episodes and memories, and chunks itself
STORED = (
    "SELECT c.relname, c.reloptions FROM pg_class c WHERE c.oid IN (SELECT relid FROM unnest(ARRAY['episodes', 'memories']) t "
    "CROSS JOIN LATERAL pg_partition_tree(t::regclass) p WHERE p.isleaf) OR c.oid = 'chunks'::regclass"
)


def test_every_table_of_items_keeps_its_rows_whole(admin_engine):
    with admin_engine.connect() as c:
        got = c.execute(text(STORED)).all()
    assert "chunks" in dict(got) and sum(n.startswith(("episodes_p", "memories_p")) for n, _ in got) >= 2
    assert all(opts == ["toast_tuple_target=8160"] for _, opts in got), got


def test_a_typical_item_keeps_its_vector_and_lexemes_in_the_row(admin_engine, settings):
    """An episode, a memory and a chunk of ~400 characters: vector and tsvector in the row; a
    chunk of a long document: its text out of line, its vector still in the row."""
    org, (alice, *_), _ = _setup(admin_engine, settings)
    rng = random.Random(3)
    typical, long = _words(rng, 60), _words(rng, 4000)
    assert 350 < len(typical) < 700 and len(long) > 20_000
    with admin_engine.connect() as c:
        ids = {
            "episodes": c.execute(
                text(
                    f"INSERT INTO episodes (kind, content, org_id, owner_id, visibility, embedding) "
                    f"VALUES ('note', :t, :o, :u, 'org', {VEC}) RETURNING id"
                ),
                {"t": typical, "o": org, "u": alice},
            ).scalar_one(),
            "memories": c.execute(
                text(
                    f"INSERT INTO memories (root_id, text, kind, org_id, owner_id, visibility, embedding) "
                    f"VALUES (gen_random_uuid(), :t, 'fact', :o, :u, 'org', {VEC}) RETURNING id"
                ),
                {"t": typical, "o": org, "u": alice},
            ).scalar_one(),
        }
        asset = org_document(c, org, alice, "whole")
        chunk = text(
            "INSERT INTO chunks (org_id, asset_id, owner_id, visibility, ord, text, content_hash, token_count, embedding)"
            f" VALUES (:o, :a, :u, 'org', :i, :t, md5(:t), 100, {VEC}) RETURNING id"
        )
        ids["chunks"] = c.execute(chunk, {"o": org, "a": asset, "u": alice, "i": 0, "t": typical}).scalar_one()
        long_id = c.execute(chunk, {"o": org, "a": asset, "u": alice, "i": 1, "t": long}).scalar_one()
        for table, id_ in ids.items():
            body = "content" if table == "episodes" else "text"
            row = c.execute(
                text(
                    f"SELECT {IN_ROW.format(col='embedding')}, {IN_ROW.format(col='tsv')}, {IN_ROW.format(col=body)}, "
                    f"pg_column_size(embedding) FROM {table} WHERE org_id = :o AND id = :i"
                ),
                {"o": org, "i": id_},
            ).one()
            assert row == (True, True, True, 1544), (table, row)
        in_row = f"{IN_ROW.format(col='embedding')}, {IN_ROW.format(col='text')}"
        vec_in_row, text_in_row = c.execute(
            text(f"SELECT {in_row} FROM chunks WHERE org_id = :o AND id = :i"), {"o": org, "i": long_id}
        ).one()
        assert vec_in_row and not text_in_row
        c.rollback()
