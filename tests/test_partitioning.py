"""episodes and memories are hash-partitioned by org_id (migration 0015, docs/decisions.md): the
catalog says what the models declare, every partition has every index, a partition is reached
only through its parent's RLS, another org's rows never show (not even an org sharing the
partition), a search reads one partition, and rows survive 0015's downgrade and upgrade with
everything the tables carry."""

from __future__ import annotations

import re
import uuid

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import DBAPIError, ProgrammingError

from app.kit.database.pg import app_url
from tests.helpers import ep, scratch_database

TABLES = ("episodes", "memories")
PARTITIONS = 16


def test_catalog_matches_the_models_and_the_naming_rule(admin_engine):
    from app.kit.database.migrate import is_partition, partitioned_tables

    with admin_engine.connect() as c:
        parents = dict(
            c.execute(
                text(
                    "SELECT c.relname, pg_get_partkeydef(c.oid) FROM pg_partitioned_table p "
                    "JOIN pg_class c ON c.oid = p.partrelid WHERE c.relnamespace = 'public'::regnamespace"
                )
            ).all()
        )
        parts = c.execute(
            text(
                "SELECT c.relname, p.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_class c JOIN pg_inherits i "
                "ON i.inhrelid = c.oid JOIN pg_class p ON p.oid = i.inhparent WHERE c.relispartition AND c.relkind = 'r' "
                "AND c.relnamespace = 'public'::regnamespace ORDER BY 1"
            )
        ).all()
        tables = [n for (n,) in c.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))]
    assert parents == {t: "HASH (org_id)" for t in TABLES}
    assert partitioned_tables() == set(TABLES)
    for t in TABLES:
        mine = [(name, bound) for name, parent, bound in parts if parent == t]
        assert mine == [(f"{t}_p{i:02d}", f"FOR VALUES WITH (modulus {PARTITIONS}, remainder {i})") for i in range(PARTITIONS)]
    # include_object skips exactly the partitions: the rule names them all and no other table.
    assert {n for n in tables if is_partition(n)} == {name for name, _, _ in parts}


def test_every_partition_has_every_index(admin_engine):
    with admin_engine.connect() as c:
        for t in TABLES:
            parent = dict(c.execute(text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = :t"), {"t": t}).all())
            assert f"ix_{t}_embedding_hnsw" in parent and f"ix_{t}_tsv" in parent and f"pk_{t}" in parent
            attached = c.execute(
                text(
                    "SELECT p.relname, count(*), count(*) FILTER (WHERE pg_get_indexdef(i.inhrelid) LIKE "
                    "'%USING hnsw (embedding vector_cosine_ops) WITH (m=''16'', ef_construction=''64'')%'), "
                    "count(*) FILTER (WHERE pg_get_indexdef(i.inhrelid) LIKE '%USING gin (tsv)%'), bool_and(x.indisvalid) "
                    "FROM pg_inherits i JOIN pg_index x ON x.indexrelid = i.inhrelid JOIN pg_class p ON p.oid = x.indrelid "
                    "WHERE i.inhparent = ANY(SELECT CAST(n AS regclass) FROM unnest(CAST(:names AS text[])) n) GROUP BY 1"
                ),
                {"names": list(parent)},
            ).all()
            assert len(attached) == PARTITIONS
            # two HNSW graphs: every row, and the org-visible rows only (migration 0026)
            assert all(n == len(parent) and hnsw == 2 and gin == 1 and valid for _, n, hnsw, gin, valid in attached), attached
        # The unique key on versions carries over with NULLS NOT DISTINCT, in every partition.
        root = (
            c.execute(
                text("SELECT pg_get_indexdef(i.inhrelid) FROM pg_inherits i WHERE i.inhparent = 'ix_memories_root'::regclass")
            )
            .scalars()
            .all()
        )
        assert len(root) == PARTITIONS and all("UNIQUE" in d and "NULLS NOT DISTINCT" in d for d in root)


def _partition_of(admin_engine, table: str, org_id) -> str:
    with admin_engine.connect() as c:
        return c.execute(
            text(f"SELECT tableoid::regclass::text FROM {table} WHERE org_id = :o LIMIT 1"), {"o": org_id}
        ).scalar_one()


def _hash_partition(admin_engine, org_id) -> int:
    with admin_engine.connect() as c:
        return c.execute(
            text(
                "SELECT r FROM generate_series(0, :n - 1) r WHERE "
                "satisfies_hash_partition('episodes'::regclass, :n, r, CAST(:o AS uuid))"
            ),
            {"n": PARTITIONS, "o": str(org_id)},
        ).scalar_one()


def test_the_app_role_reads_a_partition_only_through_its_parent(settings, admin_engine, client, world):
    org = world.org()
    alice = world.user(org)
    assert client.post("/v1/episodes", json=ep(visibility="org"), headers=alice.h).status_code == 201
    part = _partition_of(admin_engine, "episodes", alice.org_id)
    bind = (
        "SELECT set_config('memscale.org_id', :o, true), set_config('memscale.user_id', :u, true), "
        "set_config('memscale.scope', 'all', true)"
    )
    eng = create_engine(app_url(settings))
    with eng.connect() as c:
        c.execute(text(bind), {"o": str(alice.org_id), "u": str(alice.user_id)})
        assert c.execute(text("SELECT count(*) FROM episodes")).scalar() == 1  # through the parent: its policies
        with pytest.raises(ProgrammingError, match="permission denied"):
            c.execute(text(f"SELECT count(*) FROM {part}"))
    eng.dispose()
    # Even a stray grant on the partition (GRANT ... ON ALL TABLES) shows no row: RLS is on there
    # with no policy. Granted and tried in one transaction, rolled back.
    with admin_engine.connect() as c:
        c.execute(text(f"GRANT SELECT ON {part} TO memscale_app"))
        c.execute(text("SET LOCAL ROLE memscale_app"))
        c.execute(text(bind), {"o": str(alice.org_id), "u": str(alice.user_id)})
        assert c.execute(text("SELECT count(*) FROM episodes")).scalar() == 1
        assert c.execute(text(f"SELECT count(*) FROM {part}")).scalar() == 0
        c.rollback()
    with admin_engine.connect() as c:  # and the grants are what the migration left: none on a partition
        granted = c.execute(
            text(
                "SELECT count(*) FROM information_schema.role_table_grants WHERE grantee = 'memscale_app' "
                "AND table_name ~ '^(episodes|memories)_p[0-9]+$'"
            )
        ).scalar()
    assert granted == 0


def test_another_org_sharing_the_partition_sees_nothing(settings, admin_engine, client, world):
    """Partitioning is not the isolation: two orgs in one partition are kept apart by RLS and
    visible_to exactly as before, on every path (API search and list, a raw count, a write)."""
    seen: dict[int, str] = {}
    while True:  # 17 orgs at most (pigeonhole); a handful in practice
        org = world.org()
        r = _hash_partition(admin_engine, world.orgs[org])
        if r in seen:
            a_org, b_org = seen[r], org
            break
        seen[r] = org
    alice, bob = world.user(a_org), world.user(b_org)
    word = f"zebra{uuid.uuid4().hex[:6]}"
    mine = client.post("/v1/episodes", json=ep(f"the {word} cluster restarts nightly", visibility="org"), headers=alice.h)
    assert mine.status_code == 201
    m = client.post(
        "/v1/memories", json={"text": f"{word} restarts nightly", "kind": "fact", "visibility": "org"}, headers=alice.h
    )
    assert m.status_code == 201
    client.post("/v1/episodes", json=ep(f"bob's own {word} note", visibility="private"), headers=bob.h)
    assert _partition_of(admin_engine, "episodes", alice.org_id) == _partition_of(admin_engine, "episodes", bob.org_id)
    for mode in ("hybrid", "vector", "text"):
        got = client.post("/v1/search", json={"query": f"{word} cluster", "mode": mode, "k": 50}, headers=bob.h).json()
        assert mine.json()["id"] not in {x["id"] for x in got["results"]} and m.json()["id"] not in {
            x["id"] for x in got["results"]
        }, mode
    assert client.get(f"/v1/episodes/{mine.json()['id']}", headers=bob.h).status_code == 404
    assert client.get(f"/v1/memories/{m.json()['id']}", headers=bob.h).status_code == 404
    eng = create_engine(app_url(settings))
    with eng.connect() as c:
        c.execute(
            text("SELECT set_config('memscale.org_id', :o, true), set_config('memscale.scope', 'all', true)"),
            {"o": str(bob.org_id)},
        )
        for t in TABLES:
            assert c.execute(text(f"SELECT count(*) FROM {t} WHERE org_id = :a"), {"a": alice.org_id}).scalar() == 0
        assert c.execute(text("SELECT count(DISTINCT org_id) FROM episodes")).scalar() == 1
        with pytest.raises(DBAPIError, match="row-level security"):  # the parent's WITH CHECK holds on routing
            c.execute(
                text("INSERT INTO episodes (org_id, owner_id, kind, content) VALUES (:a, :u, 'note', 'x')"),
                {"a": alice.org_id, "u": alice.user_id},
            )
    eng.dispose()


def test_a_search_reads_one_partition_per_table(app, client, world, embedder):
    """Every statement a hybrid search over all types sends to episodes or memories, explained with
    its own parameters: the planner prunes to the org's partition (the service names org_id)."""
    from app.auth.principal import Principal
    from app.kit.database.db import bind_principal
    from app.search.schemas import SearchFilters
    from app.search.service import RankCall, rank

    org = world.org()
    alice = world.user(org)
    items = [ep(f"the deploy of service {i} failed on a cold cache", session_id="s1") for i in range(6)]
    assert client.post("/v1/episodes/batch", json={"items": items}, headers=alice.h).status_code in (200, 201)
    assert (
        client.post("/v1/memories", json={"text": "deploys need a warm cache", "kind": "rule"}, headers=alice.h).status_code
        == 201
    )
    p = Principal(org_id=alice.org_id, user_id=alice.user_id, name=alice.name, roles=("member",), groups=(), clearances=())
    captured: list[tuple[str, object]] = []

    def capture(conn, cursor, statement, params, context, executemany):
        if re.search(r"\b(episodes|memories)\b", statement):
            captured.append((statement, params))

    q = "why did the deploy fail"
    with app.state.sessions() as db:
        bind_principal(db, p)
        conn = db.connection()
        event.listen(conn, "before_cursor_execute", capture)
        try:
            got, _ = rank(
                db,
                RankCall(
                    principal=p,
                    query=q,
                    qvec=embedder.embed([q])[0],
                    types=["memory", "episode", "chunk"],
                    k=10,
                    mode="hybrid",
                    filters=SearchFilters(),
                    ef_search=40,
                ),
            )
        finally:
            event.remove(conn, "before_cursor_execute", capture)
        assert got
        assert captured
        for statement, params in captured:
            plan = "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + statement, params))
            for t in TABLES:
                if re.search(rf"\b{t}\b", statement):
                    parts = set(re.findall(rf"\b{t}_p\d\d\b", plan))
                    assert len(parts) <= 1, (statement[:300], plan)
            assert re.findall(r"\b(?:episodes|memories)_p\d\d\b", plan), (statement[:300], plan)
        db.rollback()


# --- 0015 down and up with rows in place -----------------------------------------------------

PROBES = """
CREATE FUNCTION probe_quality() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN NEW.quality := coalesce(NEW.quality, 'probe'); RETURN NEW; END $$;
CREATE TRIGGER probe_quality BEFORE INSERT ON episodes FOR EACH ROW EXECUTE FUNCTION probe_quality();
COMMENT ON TRIGGER probe_quality ON episodes IS 'probe trigger';
COMMENT ON TABLE memories IS 'probe table comment';
COMMENT ON COLUMN memories.text IS 'probe column comment';
COMMENT ON INDEX ix_episodes_tsv IS 'probe index comment';
COMMENT ON POLICY branch_read ON memories IS 'probe policy comment';
CREATE TABLE probe_refs (org_id uuid NOT NULL, episode_id uuid NOT NULL,
  CONSTRAINT probe_refs_episode FOREIGN KEY (org_id, episode_id) REFERENCES episodes (org_id, id) ON DELETE CASCADE);
COMMENT ON CONSTRAINT probe_refs_episode ON probe_refs IS 'probe fk comment';
"""

FINGERPRINT = "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY org_id, id), '')) FROM {t} t"

STATE = """
SELECT (SELECT relkind FROM pg_class WHERE oid = 'episodes'::regclass),
       (SELECT relkind FROM pg_class WHERE oid = 'memories'::regclass),
       (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'episodes'::regclass AND tgname = 'probe_quality'),
       obj_description('memories'::regclass, 'pg_class'),
       col_description('memories'::regclass, (SELECT attnum FROM pg_attribute WHERE attrelid = 'memories'::regclass
                                              AND attname = 'text')),
       obj_description('ix_episodes_tsv'::regclass, 'pg_class'),
       (SELECT obj_description(oid, 'pg_policy') FROM pg_policy WHERE polrelid = 'memories'::regclass
         AND polname = 'branch_read'),
       (SELECT obj_description(oid, 'pg_trigger') FROM pg_trigger WHERE tgname = 'probe_quality' AND tgparentid = 0),
       (SELECT obj_description(oid, 'pg_constraint') FROM pg_constraint WHERE conname = 'probe_refs_episode'
         AND conparentid = 0),
       (SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'probe_refs_episode' AND conparentid = 0),
       (SELECT count(*) FROM pg_policy WHERE polrelid IN ('episodes'::regclass, 'memories'::regclass)),
       (SELECT string_agg(relname || ':' || relrowsecurity, ',' ORDER BY relname) FROM pg_class
         WHERE relname IN ('episodes', 'memories')),
       has_table_privilege('memscale_app', 'episodes', 'SELECT, INSERT, UPDATE, DELETE'),
       has_table_privilege('memscale_app', 'memories', 'SELECT, INSERT, UPDATE, DELETE')
"""


@pytest.fixture
def scratch(settings):
    with scratch_database(settings, "memscale_parttest") as (s, eng):
        yield s, eng


def _fill(c) -> None:
    """Three orgs, a branch, episodes and versioned memories (main and branch), embeddings and
    NULL embeddings, through the owner role (RLS does not apply to it)."""
    import random

    rng = random.Random(3)
    vec = lambda: "[" + ",".join(f"{rng.uniform(-1, 1):.4f}" for _ in range(384)) + "]"  # noqa: E731
    for o in range(3):
        org = c.execute(text("INSERT INTO orgs (name) VALUES (:n) RETURNING id"), {"n": f"p{o}"}).scalar()
        user = c.execute(text("INSERT INTO users (org_id, name) VALUES (:o, 'u') RETURNING id"), {"o": org}).scalar()
        br = c.execute(
            text("INSERT INTO branches (org_id, name, fork_at) VALUES (:o, 'b', now()) RETURNING id"), {"o": org}
        ).scalar()
        for i in range(40):
            c.execute(
                text(
                    "INSERT INTO episodes (org_id, owner_id, kind, content, visibility, groups, labels, session_id, "
                    "branch_id, embedding) VALUES (:o, :u, 'conversation', :x, 'group', '{g1}', '{pii}', 's', :b, "
                    "CAST(:v AS vector))"
                ),
                {
                    "o": org,
                    "u": user,
                    "x": f"episode {o}.{i} about deploys",
                    "b": br if i % 5 == 0 else None,
                    "v": vec() if i % 7 else None,
                },
            )
            root = uuid.uuid4()
            for version in (1, 2):
                c.execute(
                    text(
                        "INSERT INTO memories (org_id, owner_id, root_id, version, text, kind, status, branch_id, "
                        "agent_id, embedding) VALUES (:o, :u, :r, :ver, :x, :k, :s, :b, :a, CAST(:v AS vector))"
                    ),
                    {
                        "o": org,
                        "u": user,
                        "r": root,
                        "ver": version,
                        "x": f"memory {o}.{i}.{version}",
                        "k": "skill" if i % 9 == 0 else "fact",
                        "a": "agent" if i % 9 == 0 else None,
                        "s": "superseded" if version == 1 else "active",
                        "b": br if i % 6 == 0 else None,
                        "v": vec(),
                    },
                )


def test_rows_and_everything_else_survive_0015_down_and_up(scratch):
    from app.kit.database.migrate import downgrade, upgrade

    s, eng = scratch
    upgrade(s, "head")
    with eng.begin() as c:
        _fill(c)
        c.execute(text(PROBES))
        ep_row = c.execute(text("SELECT org_id, id FROM episodes ORDER BY org_id, id LIMIT 1")).one()
        c.execute(text("INSERT INTO probe_refs VALUES (:o, :i)"), {"o": ep_row.org_id, "i": ep_row.id})
    with eng.connect() as c:
        prints = {t: c.execute(text(FINGERPRINT.format(t=t))).one() for t in TABLES}
        state = c.execute(text(STATE)).one()
    assert prints["episodes"][0] == 120 and prints["memories"][0] == 240
    assert (
        state[:2] == ("p", "p")
        and state[2] == 1
        and state[3:9]
        == (
            "probe table comment",
            "probe column comment",
            "probe index comment",
            "probe policy comment",
            "probe trigger",
            "probe fk comment",
        )
    )
    assert state[10] == 10 and state[11] == "episodes:true,memories:true" and state[12] and state[13]

    downgrade(s, "0014")
    with eng.connect() as c:
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0014"
        assert {t: c.execute(text(FINGERPRINT.format(t=t))).one() for t in TABLES} == prints
        assert c.execute(text(STATE)).one() == ("r", "r", *state[2:])
        assert c.execute(text("SELECT count(*) FROM pg_class WHERE relname ~ '^(episodes|memories)_p[0-9]+$'")).scalar() == 0

    upgrade(s, "head")
    with eng.connect() as c:
        assert {t: c.execute(text(FINGERPRINT.format(t=t))).one() for t in TABLES} == prints
        assert c.execute(text(STATE)).one() == state
        assert c.execute(text("SELECT count(*) FROM probe_refs")).scalar() == 1
    with eng.begin() as c:  # the carried trigger fires, the carried foreign key holds and cascades
        org, user = c.execute(text("SELECT org_id, owner_id FROM episodes LIMIT 1")).one()
        q = c.execute(
            text("INSERT INTO episodes (org_id, owner_id, kind, content) VALUES (:o, :u, 'note', 'x') RETURNING quality"),
            {"o": org, "u": user},
        ).scalar()
        assert q == "probe"
        c.execute(text("DELETE FROM episodes WHERE org_id = :o AND id = :i"), {"o": ep_row.org_id, "i": ep_row.id})
        assert c.execute(text("SELECT count(*) FROM probe_refs")).scalar() == 0
    with eng.connect() as c, pytest.raises(DBAPIError, match="probe_refs_episode"):
        c.execute(text("INSERT INTO probe_refs VALUES (:o, gen_random_uuid())"), {"o": ep_row.org_id})


def test_the_rebuild_refuses_what_it_cannot_carry(scratch):
    """A view on episodes would be lost (or block the drop): the migration stops, names it, and
    the whole downgrade rolls back."""
    from app.kit.database.migrate import downgrade, upgrade

    s, eng = scratch
    upgrade(s, "head")
    with eng.begin() as c:
        c.execute(text("CREATE VIEW probe_view AS SELECT org_id, id FROM episodes"))
    with pytest.raises(RuntimeError, match="view probe_view"):
        downgrade(s, "0014")
    with eng.connect() as c:
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalar() != "0014"
        assert c.execute(text("SELECT relkind FROM pg_class WHERE oid = 'episodes'::regclass")).scalar() == "p"
