"""security: service role, row-level security, append-only audit log, key lookup

The service connects as `memscale_app` (NOSUPERUSER, NOBYPASSRLS). Every tenant table has RLS
keyed on transaction-local settings (app.kit.database.db.bind_principal): the org always, and for
readable items the same visibility rule as app.kit.tenancy.access.visible_to. A session that has not set
them sees no tenant rows. The audit log refuses UPDATE and DELETE for every role.

Revision ID: 0002
Revises: 0001
"""

import os

from alembic import op

from app.kit.tenancy.rls import protect

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

ACCESS_TABLES = ("episodes", "memories", "knowledge_assets", "chunks")
ORG_TABLES = ("users", "api_keys", "idempotency_keys", "lineage_edges", "retrieval_events", "audit_log", "jobs")
ROLE = "memscale_app"

FUNCTIONS = """
CREATE FUNCTION memscale_org() RETURNS uuid LANGUAGE sql STABLE AS
  $$ SELECT nullif(current_setting('memscale.org_id', true), '')::uuid $$;
CREATE FUNCTION memscale_user() RETURNS uuid LANGUAGE sql STABLE AS
  $$ SELECT nullif(current_setting('memscale.user_id', true), '')::uuid $$;
CREATE FUNCTION memscale_groups() RETURNS text[] LANGUAGE sql STABLE AS
  $$ SELECT coalesce(ARRAY(SELECT jsonb_array_elements_text(
       coalesce(nullif(current_setting('memscale.groups', true), ''), '[]')::jsonb)), '{}') $$;
CREATE FUNCTION memscale_clearances() RETURNS text[] LANGUAGE sql STABLE AS
  $$ SELECT coalesce(ARRAY(SELECT jsonb_array_elements_text(
       coalesce(nullif(current_setting('memscale.clearances', true), ''), '[]')::jsonb)), '{}') $$;
CREATE FUNCTION memscale_all_scopes() RETURNS boolean LANGUAGE sql STABLE AS
  $$ SELECT coalesce(current_setting('memscale.scope', true), '') = 'all' $$;

CREATE FUNCTION memscale_key_lookup(p_id uuid)
  RETURNS TABLE(org_id uuid, user_id uuid, salt bytea, secret_hash bytea)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS
  $$ SELECT org_id, user_id, salt, secret_hash FROM api_keys WHERE id = p_id AND revoked_at IS NULL $$;

CREATE FUNCTION memscale_audit_immutable() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'audit_log is append-only (% refused)', TG_OP USING ERRCODE = 'insufficient_privilege'; END $$;
"""


def upgrade() -> None:
    # The role is the server's, not the database's: two databases migrated at once on one server
    # (test workers, two services) both pass the check, and the second CREATE fails on the catalog.
    op.execute(f"""DO $$ BEGIN
      IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN
        CREATE ROLE {ROLE} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
      END IF;
      EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;  -- created by the other at that moment
      END $$""")
    password = os.environ.get("MEMSCALE_APP_DB_PASSWORD")
    if password:
        op.execute(f"ALTER ROLE {ROLE} PASSWORD '{password.replace(chr(39), chr(39) * 2)}'")
    op.execute(FUNCTIONS)
    op.execute(f"GRANT USAGE ON SCHEMA public TO {ROLE}")
    op.execute(f"GRANT EXECUTE ON FUNCTION memscale_key_lookup(uuid) TO {ROLE}")
    op.execute("REVOKE ALL ON FUNCTION memscale_key_lookup(uuid) FROM PUBLIC")
    for t in ACCESS_TABLES + ORG_TABLES:
        privs = "SELECT, INSERT" if t in ("audit_log", "retrieval_events") else "SELECT, INSERT, UPDATE, DELETE"
        protect(op, t, access=t in ACCESS_TABLES, privileges=privs)
    op.execute(f"GRANT SELECT ON orgs TO {ROLE}")
    op.execute("ALTER TABLE orgs ENABLE ROW LEVEL SECURITY")
    op.execute(f"CREATE POLICY tenant_self ON orgs TO {ROLE} USING (id = (SELECT memscale_org()))")
    op.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {ROLE}")
    op.execute("""CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
                  FOR EACH ROW EXECUTE FUNCTION memscale_audit_immutable()""")
    op.execute("""CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
                  FOR EACH STATEMENT EXECUTE FUNCTION memscale_audit_immutable()""")


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS audit_log_no_truncate ON audit_log")
    op.execute("DROP TRIGGER IF EXISTS audit_log_append_only ON audit_log")
    op.execute("DROP POLICY IF EXISTS tenant_self ON orgs")
    op.execute("ALTER TABLE orgs DISABLE ROW LEVEL SECURITY")
    for t in ACCESS_TABLES + ORG_TABLES:
        op.execute(f"DROP POLICY IF EXISTS tenant_access ON {t}")
        op.execute(f"DROP POLICY IF EXISTS tenant_org ON {t}")
        op.execute(f"ALTER TABLE {t} DISABLE ROW LEVEL SECURITY")
    op.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {ROLE}")
    op.execute(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {ROLE}")
    op.execute(f"REVOKE ALL ON SCHEMA public FROM {ROLE}")
    for fn in (
        "memscale_audit_immutable()",
        "memscale_key_lookup(uuid)",
        "memscale_all_scopes()",
        "memscale_clearances()",
        "memscale_groups()",
        "memscale_user()",
        "memscale_org()",
    ):
        op.execute(f"DROP FUNCTION IF EXISTS {fn}")
    # The role is cluster-wide and may own nothing else; keep it (harmless, NOLOGIN-free of grants).
