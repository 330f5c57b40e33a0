"""branches: copy-on-write branches and as-of reads of an org's memory; agent profiles (issue 18)

`branches` (one row per branch: parent, fork instant) and `branch_masks` (what a branch hides of
the layers below it); `branch_id` (NULL: main) on memories, episodes, lineage_edges and jobs, a
foreign key to the branch with ON DELETE CASCADE, so dropping a branch drops what it wrote.
Memory versions are unique per (root, version) in main and in each branch (NULLS NOT DISTINCT).

Row-level security, a second (restrictive) policy on the branched tables: a transaction sees
main's rows and the rows of the branches of its view (`memscale.branches`), and may insert,
update or delete only rows of its own branch (`memscale.branch`; '' is main): a branch request
that reached for a main row to change it fails (UPDATE) or deletes nothing (DELETE). `*` is every branch: erasure,
retention and dropping a branch reach every branch's rows.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

from app.kit.tenancy.rls import protect

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

BRANCHED = ("memories", "episodes", "lineage_edges", "jobs")
VIEWED = ("memories", "episodes", "lineage_edges")  # jobs: org policy only (a job's branch is a parameter)

FUNCTIONS = """
CREATE FUNCTION memscale_branch() RETURNS text LANGUAGE sql STABLE AS
  $$ SELECT coalesce(current_setting('memscale.branch', true), '') $$;
CREATE FUNCTION memscale_branches() RETURNS uuid[] LANGUAGE sql STABLE AS
  $$ SELECT coalesce(ARRAY(SELECT jsonb_array_elements_text(
       coalesce(nullif(current_setting('memscale.branches', true), ''), '[]')::jsonb)::uuid), '{}') $$;
"""

SEES = "(branch_id IS NULL OR (SELECT memscale_branch()) = '*' OR branch_id = ANY((SELECT memscale_branches())::uuid[]))"
OWN = "((SELECT memscale_branch()) = '*' OR branch_id IS NOT DISTINCT FROM nullif((SELECT memscale_branch()), '')::uuid)"
POLICIES = {  # restrictive: ANDed with the tenant policy
    "branch_read": f"FOR SELECT TO memscale_app USING {SEES}",
    "branch_insert": f"FOR INSERT TO memscale_app WITH CHECK {OWN}",
    # USING is what it sees (SELECT ... FOR UPDATE must lock a base row it reads); WITH CHECK
    # refuses the change itself: an UPDATE of a base row from a branch fails loudly.
    "branch_update": f"FOR UPDATE TO memscale_app USING {SEES} WITH CHECK {OWN}",
    "branch_delete": f"FOR DELETE TO memscale_app USING {OWN}",
}


def upgrade() -> None:
    op.execute(FUNCTIONS)
    op.create_table(
        "branches",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("parent_id", sa.UUID(), nullable=True),
        sa.Column("fork_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_branches_org_id_orgs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["org_id", "parent_id"],
            ["branches.org_id", "branches.id"],
            name=op.f("fk_branches_org_id_branches"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("org_id", "id", name=op.f("pk_branches")),
    )
    op.create_index("ix_branches_name", "branches", ["org_id", "name"], unique=True)
    op.create_index(op.f("ix_branches_org_id"), "branches", ["org_id"])
    op.create_table(
        "branch_masks",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("branch_id", sa.UUID(), nullable=False),
        sa.Column("item_type", sa.Text(), nullable=False),
        sa.Column("key", sa.UUID(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name=op.f("fk_branch_masks_org_id_orgs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["org_id", "branch_id"],
            ["branches.org_id", "branches.id"],
            name=op.f("fk_branch_masks_org_id_branches"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("org_id", "branch_id", "item_type", "key", name=op.f("pk_branch_masks")),
    )
    op.create_index(op.f("ix_branch_masks_org_id"), "branch_masks", ["org_id"])
    for t in ("branches", "branch_masks"):
        protect(op, t, access=False)
    for t in BRANCHED:
        op.add_column(t, sa.Column("branch_id", sa.UUID(), nullable=True))
        op.create_foreign_key(
            op.f(f"fk_{t}_org_id_branches"), t, "branches", ["org_id", "branch_id"], ["org_id", "id"], ondelete="CASCADE"
        )
    for t in ("memories", "episodes"):
        op.create_index(f"ix_{t}_branch", t, ["org_id", "branch_id"], postgresql_where=sa.text("branch_id IS NOT NULL"))
    op.drop_index("ix_memories_root", table_name="memories")
    op.create_index(
        "ix_memories_root",
        "memories",
        ["org_id", "root_id", "version", "branch_id"],
        unique=True,
        postgresql_nulls_not_distinct=True,
    )
    for t in VIEWED:
        for name, body in POLICIES.items():
            op.execute(f"CREATE POLICY {name} ON {t} AS RESTRICTIVE {body}")
    # Agent profiles: instructions and skills are memories of an agent (versioned, branchable).
    op.add_column("memories", sa.Column("agent_id", sa.Text(), nullable=True))
    op.drop_constraint(op.f("ck_memories_kind"), "memories", type_="check")
    op.create_check_constraint(
        op.f("ck_memories_kind"),
        "memories",
        "kind IN ('fact','rule','preference','procedure','schema_hint','instruction','skill')",
    )
    op.create_check_constraint(
        op.f("ck_memories_agent_profile"), "memories", "(kind IN ('instruction','skill')) = (agent_id IS NOT NULL)"
    )
    op.create_index("ix_memories_agent", "memories", ["org_id", "agent_id"], postgresql_where=sa.text("agent_id IS NOT NULL"))


def downgrade() -> None:
    op.execute("DELETE FROM memories WHERE agent_id IS NOT NULL")
    op.drop_index("ix_memories_agent", table_name="memories")
    op.drop_constraint(op.f("ck_memories_agent_profile"), "memories", type_="check")
    op.drop_constraint(op.f("ck_memories_kind"), "memories", type_="check")
    op.create_check_constraint(
        op.f("ck_memories_kind"), "memories", "kind IN ('fact','rule','preference','procedure','schema_hint')"
    )
    op.drop_column("memories", "agent_id")
    for t in VIEWED:
        for name in POLICIES:
            op.execute(f"DROP POLICY IF EXISTS {name} ON {t}")
    op.execute("DELETE FROM memories WHERE branch_id IS NOT NULL")
    op.drop_index("ix_memories_root", table_name="memories")
    op.create_index("ix_memories_root", "memories", ["org_id", "root_id", "version"], unique=True)
    for t in ("memories", "episodes"):
        op.drop_index(f"ix_{t}_branch", table_name=t)
    for t in BRANCHED:
        op.execute(f"DELETE FROM {t} WHERE branch_id IS NOT NULL")
        op.drop_constraint(op.f(f"fk_{t}_org_id_branches"), t, type_="foreignkey")
        op.drop_column(t, "branch_id")
    for t in ("branch_masks", "branches"):
        op.execute(f"DROP POLICY IF EXISTS tenant_org ON {t}")
    op.drop_table("branch_masks")
    op.drop_table("branches")
    op.execute("DROP FUNCTION IF EXISTS memscale_branches(); DROP FUNCTION IF EXISTS memscale_branch();")
