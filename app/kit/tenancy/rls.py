"""Row-level-security policy SQL shared by the migrations (the database twin of kit.tenancy.access)."""

ROLE = "memscale_app"

ACCESS_POLICY = """
CREATE POLICY tenant_access ON {t} TO {role}
  USING (org_id = (SELECT memscale_org()) AND (
         (SELECT memscale_all_scopes())
         OR owner_id = (SELECT memscale_user())
         OR ((visibility = 'org' OR (visibility = 'group' AND groups && (SELECT memscale_groups())))
             AND labels <@ (SELECT memscale_clearances()))))
  WITH CHECK (org_id = (SELECT memscale_org()))
"""

ORG_POLICY = """
CREATE POLICY tenant_org ON {t} TO {role}
  USING (org_id = (SELECT memscale_org())) WITH CHECK (org_id = (SELECT memscale_org()))
"""


def protect(op, table: str, *, access: bool, privileges: str = "SELECT, INSERT, UPDATE, DELETE") -> None:
    """Grant the service role, enable RLS and add the tenant policy on `table`."""
    op.execute(f"GRANT {privileges} ON {table} TO {ROLE}")
    op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    op.execute((ACCESS_POLICY if access else ORG_POLICY).format(t=table, role=ROLE))
