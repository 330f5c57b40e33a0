"""key principal: a key and its user in one lookup (per-request cost)

Every authenticated request ran four statements before its own work: the key by id (SECURITY
DEFINER: no org is bound yet and RLS hides every key), the org binding, the user row, the
principal binding. `memscale_key_principal(id)` returns the live key's salt and hash with its
user's name, roles, groups and clearances, so authentication is one lookup and one binding. The
caller still checks the secret against the hash before it trusts any of it, as before.

Revision ID: 0017
Revises: 0016
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

ROLE = "memscale_app"
FUNCTION = """
CREATE OR REPLACE FUNCTION memscale_key_principal(p_id uuid)
  RETURNS TABLE(org_id uuid, user_id uuid, salt bytea, secret_hash bytea, name text, roles text[],
                groups text[], clearances text[])
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS
  $$ SELECT k.org_id, k.user_id, k.salt, k.secret_hash, u.name, u.roles, u.groups, u.clearances
       FROM api_keys k JOIN users u ON u.org_id = k.org_id AND u.id = k.user_id
      WHERE k.id = p_id AND k.revoked_at IS NULL $$;
"""


def create(execute) -> None:
    """The function and its grants (also used by bench/scale's `global` layout, kept at 0014)."""
    execute(FUNCTION)
    execute(f"GRANT EXECUTE ON FUNCTION memscale_key_principal(uuid) TO {ROLE}")
    execute("REVOKE ALL ON FUNCTION memscale_key_principal(uuid) FROM PUBLIC")


def upgrade() -> None:
    create(op.execute)


def downgrade() -> None:
    op.execute("DROP FUNCTION memscale_key_principal(uuid)")
