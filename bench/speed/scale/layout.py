"""The two layouts the scale bench compares, both from the migrations, applied to the bench
database right after it is migrated and while it is empty:

- `hash` (the schema since migration 0015): episodes and memories hash-partitioned by org_id,
  16 partitions, one HNSW and one GIN index per partition. `--partitions N` other than 16
  rebuilds the tables with N partitions by 0015's own `rebuild` (the same catalog-driven copy the
  migration and its downgrade use), to compare partition counts; the revision stays 0015.
- `global` (the schema before 0015): the bench database is migrated down to 0014, one table per
  type with one global HNSW index, exactly what 0015's downgrade restores.

A later migration past 0015 would make `global` lag behind the code (reads may name its new
columns); then this needs that migration's downgrade too, or the option goes. 0016 is an index
only (reads the same without it); 0017's authentication function and 0018's vocabulary table are
created again after the downgrade (`KEY_PRINCIPAL`, `LEXICON`): the code authenticates through the
one and ranks conversation turns with the other. 0019 only drops indexes (the `global` layout
keeps its single-column org_id indexes: reads the same, inserts pay one more index entry).
A rebuild with another partition count sets 0035's `toast_tuple_target` on its new partitions
(a partition's storage parameters are its own: 0015's copy does not carry them).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sqlalchemy import create_engine, text

GLOBAL_REVISION = "0014"  # the last revision before the partitioning migration
VERSIONS = Path(__file__).resolve().parents[3] / "migrations" / "versions"
MIGRATION = VERSIONS / "20261201_partition_by_org.py"
KEY_PRINCIPAL = VERSIONS / "20261201_key_principal.py"
LEXICON = VERSIONS / "20261202_lexicon.py"
FEEDBACK = VERSIONS / "20261205_feedback.py"
BM25 = VERSIONS / "20261205_bm25_stats.py"
POSTINGS = VERSIONS / "20261208_bm25_postings.py"
WHOLE_ROWS = VERSIONS / "20261210_vectors_in_row.py"


def _migration(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def partitioning():
    """Migration 0015's module (its TABLES, PARTITIONS and `rebuild`), loaded from its file."""
    return _migration(MIGRATION, "memscale_migration_0015")


def apply(settings, layout: str, partitions: int | None = None) -> None:
    """Turn a freshly migrated (head) bench database into `layout`."""
    from app.kit.database.migrate import downgrade
    from app.kit.database.pg import admin_url

    if layout == "global":
        downgrade(settings, GLOBAL_REVISION)
        keep_key_principal(settings)
        return
    mig = partitioning()
    if partitions in (None, mig.PARTITIONS):
        return
    eng = create_engine(admin_url(settings))
    with eng.begin() as c:
        for t in mig.TABLES:
            mig.rebuild(c, t, partitions)
        _migration(WHOLE_ROWS, "memscale_migration_0035").keep_whole(c)  # the new partitions' storage parameter
    eng.dispose()


def keep_key_principal(settings) -> None:
    """0017's authentication function, 0018's vocabulary table, the feedback tables, the kept BM25
    statistics and their postings (tables, triggers, backfill) on a database kept below them (its
    other tables are older)."""
    from app.kit.database.pg import admin_url

    eng = create_engine(admin_url(settings))
    with eng.begin() as c:
        _migration(KEY_PRINCIPAL, "memscale_migration_0017").create(lambda sql: c.exec_driver_sql(sql))
        if c.execute(text("SELECT to_regclass('lexicon')")).scalar() is None:
            _migration(LEXICON, "memscale_migration_0018").create(lambda sql: c.exec_driver_sql(sql))
        if c.execute(text("SELECT to_regclass('feedback_votes')")).scalar() is None:
            _migration(FEEDBACK, "memscale_migration_feedback").create(lambda sql: c.exec_driver_sql(sql))
        for table, path, name in (("bm25_buckets", BM25, "bm25"), ("bm25_postings", POSTINGS, "postings")):
            if c.execute(text("SELECT to_regclass(:t)"), {"t": table}).scalar() is None:
                from alembic.migration import MigrationContext
                from alembic.operations import Operations

                with Operations.context(MigrationContext.configure(c)):
                    _migration(path, f"memscale_migration_{name}").upgrade()
    eng.dispose()


def describe(settings) -> dict:
    """What the database holds: per table, partitioned or not and how many partitions."""
    from app.kit.database.pg import admin_url

    eng = create_engine(admin_url(settings))
    with eng.connect() as c:
        out = {
            t: c.execute(text("SELECT count(*) FROM pg_inherits WHERE inhparent = CAST(:t AS regclass)"), {"t": t}).scalar()
            for t in partitioning().TABLES
        }
        out["revision"] = c.execute(text("SELECT version_num FROM alembic_version")).scalar()
    eng.dispose()
    return out


def upgrade_keeping_layout(settings) -> str:
    """Migrate a bench database built by an earlier run to the current code without changing its
    layout: one below 0015 (built global) goes to 0014, one at or past 0015 to head (re-partitioning
    a 1M-row global database would take many minutes and change what is compared)."""
    from alembic.script import ScriptDirectory

    from app.kit.database.migrate import alembic_config, upgrade
    from app.kit.database.pg import admin_url

    script = ScriptDirectory.from_config(alembic_config(settings))
    below = {r.revision for r in script.iterate_revisions(GLOBAL_REVISION, "base")}
    eng = create_engine(admin_url(settings))
    with eng.connect() as c:
        current = c.execute(text("SELECT version_num FROM alembic_version")).scalar()
    eng.dispose()
    target = GLOBAL_REVISION if current in below else "head"
    upgrade(settings, target)
    if target == GLOBAL_REVISION:
        keep_key_principal(settings)
    return target
