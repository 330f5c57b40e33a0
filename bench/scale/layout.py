"""`--layout hash`: episodes and memories hash-partitioned by org_id, one HNSW index per
partition. Bench-only DDL on the bench database, applied right after the migrations, while the
tables are empty: each table is rebuilt as `PARTITION BY HASH (org_id)` with the same columns,
checks, defaults, generated tsv, keys, foreign keys, indexes (created on the parent, so every
partition gets its own), RLS policies and grants, all read back from the catalog so that the
copy cannot drift from the migrations. The primary key (org_id, id) already holds the partition
key, which PostgreSQL requires of every unique index on a partitioned table."""

from __future__ import annotations

from sqlalchemy import create_engine, text

from bench.scale.data import TABLES


def partition_by_org(settings, partitions: int) -> None:  # noqa: ANN001
    from app.kit.pg import admin_url

    eng = create_engine(admin_url(settings))
    with eng.begin() as c:
        for t in TABLES:
            q = lambda sql: c.execute(text(sql), {"t": t}).all()  # noqa: E731
            indexes = q("SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = :t "
                        "AND indexname NOT LIKE 'pk\\_%'")
            keys = q("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = CAST(:t AS regclass) "
                     "AND contype IN ('p', 'f') ORDER BY contype DESC")
            policies = q("SELECT policyname, permissive, roles, cmd, qual, with_check FROM pg_policies WHERE tablename = :t")
            grants = q("SELECT grantee, string_agg(privilege_type, ', ') FROM information_schema.role_table_grants "
                       "WHERE table_name = :t AND grantee <> current_user GROUP BY grantee")
            c.execute(text(f"ALTER TABLE {t} RENAME TO {t}_flat"))
            c.execute(text(f"CREATE TABLE {t} (LIKE {t}_flat INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED "
                           f"INCLUDING STORAGE) PARTITION BY HASH (org_id)"))
            for i in range(partitions):
                c.execute(text(f"CREATE TABLE {t}_p{i:02d} PARTITION OF {t} FOR VALUES WITH (MODULUS {partitions}, "
                               f"REMAINDER {i})"))
            c.execute(text(f"DROP TABLE {t}_flat"))
            for name, d in keys:
                c.execute(text(f"ALTER TABLE {t} ADD CONSTRAINT {name} {d}"))
            for (d,) in indexes:
                c.execute(text(d))
            c.execute(text(f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY"))
            for name, permissive, roles, cmd, qual, check in policies:
                c.execute(text(f"CREATE POLICY {name} ON {t} AS {permissive} FOR {cmd} TO {', '.join(roles)}"
                               + (f" USING ({qual})" if qual else "") + (f" WITH CHECK ({check})" if check else "")))
            for grantee, privs in grants:
                c.execute(text(f"GRANT {privs} ON {t} TO {grantee}"))
    eng.dispose()
