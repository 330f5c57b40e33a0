"""Ready for Citus (docs/scale-out.md): every tenant table would be distributed by org_id, and
Citus requires the distribution column in every primary key, unique constraint/index and foreign
key between distributed tables. Read from the catalog of the migrated database, so a migration
that adds a table or key without org_id fails here."""

from __future__ import annotations

import pytest
from sqlalchemy import text

# Not distributed by org_id, named on purpose: a new table must be added here or carry org_id.
REFERENCE = {"orgs"}  # replicated to every node (Citus reference table); tenant tables may reference it
LOCAL = {"alembic_version", "rate_buckets"}  # coordinator-only bookkeeping, never joined with tenant data

CONSTRAINTS = """
SELECT t.relname AS tbl, c.conname AS name, c.contype AS kind,
       array(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, o)
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.o)::text[] AS cols,
       r.relname AS ref,
       array(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY k(n, o)
             JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.o)::text[] AS ref_cols
FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid LEFT JOIN pg_class r ON r.oid = c.confrelid
WHERE c.contype IN ('p', 'u', 'f') AND t.relnamespace = CAST(:schema AS regnamespace)
"""
UNIQUE_INDEXES = """
SELECT t.relname AS tbl, i.relname AS name,
       array(SELECT a.attname FROM unnest(x.indkey) WITH ORDINALITY k(n, o)
             JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.n ORDER BY k.o)::text[] AS cols
FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
WHERE x.indisunique AND t.relnamespace = CAST(:schema AS regnamespace)
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)
"""
TABLES = """
SELECT c.relname, EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'org_id'
                          AND NOT a.attisdropped) AS has_org
FROM pg_class c WHERE c.relkind IN ('r', 'p') AND c.relnamespace = CAST(:schema AS regnamespace)
"""


def violations(conn, schema: str = "public", reference=REFERENCE, local=LOCAL) -> list[str]:
    tables = dict(conn.execute(text(TABLES), {"schema": schema}).all())
    out = [
        f"{t}: no org_id and not listed as a reference or local table"
        for t, has in tables.items()
        if not has and t not in reference | local
    ]
    tenant = {t for t, has in tables.items() if has and t not in reference | local}
    for r in conn.execute(text(CONSTRAINTS), {"schema": schema}).mappings():
        if r["tbl"] in tenant and r["kind"] in ("p", "u") and "org_id" not in r["cols"]:
            out.append(f"{r['tbl']}.{r['name']}: {'primary key' if r['kind'] == 'p' else 'unique'} {r['cols']} without org_id")
        if r["kind"] != "f":
            continue
        if r["tbl"] in tenant and r["ref"] in tenant:
            pairs = dict(zip(r["cols"], r["ref_cols"]))
            if pairs.get("org_id") != "org_id":
                out.append(f"{r['tbl']}.{r['name']}: {r['cols']} -> {r['ref']}{r['ref_cols']} does not pair org_id with org_id")
        elif r["tbl"] not in tenant and r["ref"] in tenant:
            out.append(f"{r['tbl']}.{r['name']}: a reference/local table refers to tenant table {r['ref']}")
    for r in conn.execute(text(UNIQUE_INDEXES), {"schema": schema}).mappings():
        if r["tbl"] in tenant and "org_id" not in r["cols"]:
            out.append(f"{r['tbl']}.{r['name']}: unique index {r['cols']} without org_id")
    return out


def test_every_tenant_key_includes_org_id(admin_engine):
    with admin_engine.connect() as c:
        found = violations(c)
        tenant = [
            t
            for (t,) in c.execute(
                text("SELECT table_name FROM information_schema.columns WHERE column_name = 'org_id' AND table_schema = 'public'")
            )
        ]
    assert found == []
    assert {"episodes", "memories", "chunks", "users", "audit_log", "retrieval_events"} <= set(tenant)
    # The hash partitions of episodes and memories (migration 0015) are checked like any table:
    # their keys are the parent's, org_id first; on Citus the shards take their place.
    assert {"episodes_p00", "memories_p15"} <= set(tenant)


def test_the_check_catches_what_citus_would_refuse(admin_engine):
    """The same check on a scratch schema with one table of each mistake (rolled back)."""
    with admin_engine.connect() as c:
        c.execute(text("CREATE SCHEMA citus_probe"))
        c.execute(text("CREATE TABLE citus_probe.orgs (id uuid PRIMARY KEY)"))
        c.execute(
            text("CREATE TABLE citus_probe.users (org_id uuid REFERENCES citus_probe.orgs, id uuid, PRIMARY KEY (org_id, id))")
        )
        c.execute(
            text(
                "CREATE TABLE citus_probe.good (org_id uuid, id uuid, owner_id uuid, PRIMARY KEY (org_id, id), "
                "FOREIGN KEY (org_id, owner_id) REFERENCES citus_probe.users (org_id, id))"
            )
        )
        c.execute(text("CREATE TABLE citus_probe.bad_pk (org_id uuid, id uuid PRIMARY KEY)"))
        c.execute(
            text(
                "CREATE TABLE citus_probe.bad_fk (org_id uuid, id uuid, user_id uuid, PRIMARY KEY (org_id, id), UNIQUE (user_id))"
            )
        )
        c.execute(
            text("ALTER TABLE citus_probe.bad_fk ADD FOREIGN KEY (org_id, user_id) REFERENCES citus_probe.users (id, org_id)")
        )  # org_id paired with id: crosses shards
        c.execute(text("CREATE UNIQUE INDEX ON citus_probe.good (owner_id)"))
        c.execute(text("CREATE TABLE citus_probe.loose (id uuid PRIMARY KEY)"))
        found = violations(c, "citus_probe")
        c.rollback()
    joined = "\n".join(found)
    assert "bad_pk.bad_pk_pkey: primary key ['id'] without org_id" in joined
    assert "bad_fk.bad_fk_user_id_key: unique ['user_id'] without org_id" in joined
    assert "does not pair org_id with org_id" in joined
    assert "good.good_owner_id_idx: unique index ['owner_id'] without org_id" in joined
    assert "loose: no org_id" in joined
    assert not any(v.startswith(("users", "orgs", "good.good_pkey")) for v in found), found
    assert len(found) == 5, found


@pytest.mark.parametrize("table", ["episodes", "session_messages"])
def test_a_reference_across_orgs_is_refused(admin_engine, world, table):
    """The composite foreign keys hold in the database: a row of org A cannot name org B's user."""
    from sqlalchemy.exc import IntegrityError

    a, b = world.org(), world.org()
    ua, ub = world.user(a), world.user(b)
    with admin_engine.connect() as c:
        if table == "episodes":
            stmt = "INSERT INTO episodes (org_id, owner_id, kind, content) VALUES (:o, :u, 'note', 'x')"
        else:
            c.execute(
                text("INSERT INTO sessions (id, org_id, owner_id, budget_tokens) VALUES (gen_random_uuid(), :o, :mine, 1000)"),
                {"o": ua.org_id, "mine": ua.user_id},
            )
            stmt = (
                "INSERT INTO session_messages (org_id, owner_id, session_id, seq, role, content, tokens) "
                "SELECT :o, :u, id, 1, 'user', 'x', 1 FROM sessions WHERE org_id = :o LIMIT 1"
            )
        with pytest.raises(IntegrityError):
            c.execute(text(stmt), {"o": ua.org_id, "u": ub.user_id})
        c.rollback()


# Tables whose statements need not name an org: the reference table and coordinator bookkeeping.
TENANT_TABLES = (
    "episodes",
    "memories",
    "chunks",
    "knowledge_assets",
    "knowledge_nodes",
    "lineage_edges",
    "retrieval_events",
    "audit_log",
    "jobs",
    "users",
    "api_keys",
    "idempotency_keys",
    "sessions",
    "session_messages",
    "tool_calls",
    "cartridges",
    "branches",
    "branch_masks",
    "pipeline_cursors",
)


def test_every_statement_names_the_org(client, world, app, run_job):
    """RLS alone fans a query out to every shard on Citus (citusdata/citus#7415): every statement
    the service sends to a tenant table names org_id itself. Captured from a session of writes,
    reads, a branch, jobs and erasure; a statement without org_id is listed."""
    import json
    import re

    from sqlalchemy import event

    from app.llm.fake import FakeGateway
    from tests.helpers import ep

    eng = app.state.sessions.kw["bind"]
    seen: list[str] = []

    def capture(conn, cursor, statement, params, context, executemany):
        seen.append(statement)

    event.listen(eng, "before_cursor_execute", capture)
    try:
        org = world.org()
        steward, alice = world.user(org, roles=("steward",)), world.user(org)
        e = client.post(
            "/v1/episodes", json=ep("I always use the staging cluster for load tests.", kind="conversation"), headers=alice.h
        ).json()
        m = client.post(
            "/v1/memories", json={"text": "deploys on tuesday", "kind": "fact", "visibility": "org"}, headers=steward.h
        ).json()
        client.patch(f"/v1/memories/{m['id']}", json={"text": "deploys on thursday"}, headers=steward.h)
        client.post("/v1/search", json={"query": "deploy"}, headers=alice.h)
        client.post("/v1/context", json={"query": "deploy", "as_of": m["recorded_at"]}, headers=alice.h)
        client.get(f"/v1/lineage/memory/{m['id']}", headers=steward.h)
        sid = client.post("/v1/sessions", json={}, headers=alice.h).json()["id"]
        client.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": "hi"}, headers=alice.h)
        client.get(f"/v1/sessions/{sid}/context", headers=alice.h)
        client.post("/v1/branches", json={"name": "b"}, headers=steward.h)
        client.post("/v1/memories", json={"text": "x", "kind": "fact"}, headers={**steward.h, "Memscale-Branch": "b"})
        client.get("/v1/branches/b/diff", headers=steward.h)
        fake = FakeGateway(default=json.dumps({"score": 0.9, "useful": 1, "suspicious": 0, "reason": "ok", "memories": []}))
        assert run_job(alice.org_id, "distill", {"min_age_s": 0}, gateway=fake).status == "succeeded"
        assert run_job(alice.org_id, "consolidate", {}).status == "succeeded"
        client.delete(f"/v1/memories/{m['id']}", headers=steward.h)
        client.delete(f"/v1/episodes/{e['id']}", headers=alice.h)
        client.delete("/v1/branches/b", headers=steward.h)
        assert client.delete(f"/v1/users/{alice.user_id}/data", headers=alice.h).status_code == 202
    finally:
        event.remove(eng, "before_cursor_execute", capture)
    touches = re.compile(rf"\b(from|update|into|join)\s+({'|'.join(TENANT_TABLES)})\b")
    bad = sorted({" ".join(s.split())[:200] for s in seen if touches.search(s.lower()) and "org_id" not in s.lower()})
    assert len(seen) > 100 and bad == [], bad
