"""Run alembic programmatically against the configured (or embedded) database."""

from __future__ import annotations

import re
from pathlib import Path

from alembic import command
from alembic.config import Config

from app.config import Settings
from app.kit.database.pg import admin_url

ROOT = Path(__file__).resolve().parents[3]


def partitioned_tables() -> frozenset[str]:
    """The models' tables declared `postgresql_partition_by` (episodes, memories: migration 0015)."""
    from app.kit.registry import metadata

    return frozenset(t.name for t in metadata.tables.values() if t.dialect_options["postgresql"]["partition_by"])


def is_partition(name: str) -> bool:
    """`<table>_pNN` of a partitioned model table: migration 0015 names its partitions so
    (tests/test_partitioning.py checks the rule against pg_inherits)."""
    m = re.fullmatch(r"(\w+)_p\d{2,}", name)
    return bool(m) and m.group(1) in partitioned_tables()


def include_object(obj, name, type_, reflected, compare_to) -> bool:
    """alembic's own table is not ours to diff, and neither are the partitions of a partitioned
    table or their indexes, nor the copies of a reference to one: the models declare the parent,
    whose columns, keys, indexes and references PostgreSQL repeats for every partition."""
    if type_ == "table":
        return name != "alembic_version" and not is_partition(name)
    if type_ in ("index", "unique_constraint", "foreign_key_constraint") and getattr(obj, "table", None) is not None:
        if type_ == "foreign_key_constraint" and reflected and is_partition(obj.referred_table.name):
            return False  # a reference to a partitioned table is repeated for each of its partitions
        return not is_partition(obj.table.name)
    return True


def alembic_config(settings: Settings) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.attributes["url"] = admin_url(settings)
    return cfg


def upgrade(settings: Settings, revision: str = "head") -> None:
    command.upgrade(alembic_config(settings), revision)


def downgrade(settings: Settings, revision: str) -> None:
    command.downgrade(alembic_config(settings), revision)
