"""`bm25_hits_<type>` finds the rows holding a lexeme that the caller may see by indexes that hold
org and access with the text: the same ids as the row-level policy gives, without reading the
rows of the lexeme the caller may not see (migration 0030)."""

from __future__ import annotations

from sqlalchemy import text

from tests.test_bm25_stats import _principal, _setup

POLICED = (
    "SELECT id FROM episodes WHERE tsv @@ to_tsquery('english', 'pottery') AND branch_id IS NULL "
    "AND quality IS DISTINCT FROM 'quarantined'"
)
HITS = "SELECT id FROM bm25_hits_episode(to_tsquery('english', 'pottery'))"


def _seen(app, p) -> list:
    from app.kit.database.db import bind_principal

    with app.state.sessions() as db:
        bind_principal(db, p)
        ids = sorted(db.execute(text(HITS)).scalars().all())
        assert ids == sorted(db.execute(text(POLICED)).scalars().all())
        db.rollback()
    return ids


def test_every_part_of_the_policy_is_found_owners_rows_in_groups_they_left_included(app, client, admin_engine, settings):
    org, (alice, bob, _carol), _ = _setup(admin_engine, settings)
    with admin_engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO episodes (kind, content, org_id, owner_id, visibility, groups, labels) VALUES "
                "('note', 'pottery a', :o, :a, 'private', '{}', '{}'), ('note', 'pottery b', :o, :b, 'private', '{}', '{}'), "
                "('note', 'pottery c', :o, :b, 'group', '{a}', '{}'), ('note', 'pottery d', :o, :b, 'group', '{b}', '{x}'), "
                "('note', 'pottery e', :o, :b, 'org', '{}', '{x}'), ('note', 'pottery f', :o, :b, 'org', '{}', '{}')"
            ),
            {"o": org, "a": alice, "b": bob},
        )
    with admin_engine.connect() as c:

        def content(ids: list) -> list:
            return c.execute(text("SELECT content FROM episodes WHERE id = ANY(:ids) ORDER BY 1"), {"ids": ids}).scalars().all()

        # bob in no group and not cleared for x still sees every row he owns, once
        assert content(_seen(app, _principal(org, bob))) == [f"pottery {x}" for x in "bcdef"]
        assert content(_seen(app, _principal(org, alice, groups=["a", "b"]))) == ["pottery a", "pottery c", "pottery f"]
        assert content(_seen(app, _principal(org, alice, groups=["b"], clearances=["x"]))) == [
            "pottery a",
            "pottery d",
            "pottery e",
            "pottery f",
        ]


def test_the_rows_of_the_lexeme_the_caller_may_not_see_are_not_read(app, client, admin_engine, settings):
    """2,000 rows holding the word (of 20,000), private to another user or shared with a group
    the caller is not in; 15 the caller sees. The lookup fetches about the rows it returns, not the others
    (the text index alone gave every row holding the word, each read to test its access)."""
    from app.kit.database.db import bind_principal

    org, (alice, bob, _carol), _ = _setup(admin_engine, settings)
    with admin_engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO episodes (kind, content, org_id, owner_id, visibility, groups, labels) "
                "SELECT 'note', CASE WHEN i % 20 < 2 THEN 'pottery' ELSE 'weaving' END || ' class ' || i, :o, :b, "
                "CASE WHEN i % 2 = 0 THEN 'private' ELSE 'group' END, "
                "CASE WHEN i % 2 = 0 THEN '{}'::text[] ELSE '{b}'::text[] END, '{}' FROM generate_series(1, 20000) i"
            ),
            {"o": org, "b": bob},
        )
        c.execute(
            text(
                "INSERT INTO episodes (kind, content, org_id, owner_id, visibility, groups, labels) "
                "SELECT 'note', 'pottery for all ' || i, :o, :b, v, g, '{}'::text[] FROM generate_series(1, 5) i, "
                "(VALUES ('org', '{}'::text[]), ('group', '{a}'::text[])) s(v, g) "
                "UNION ALL SELECT 'note', 'my pottery ' || i, :o, :a, 'private', '{}'::text[], '{}'::text[] "
                "FROM generate_series(1, 5) i"
            ),
            {"o": org, "a": alice, "b": bob},
        )
        c.execute(text("ANALYZE episodes"))
    p = _principal(org, alice, groups=["a"])
    assert len(_seen(app, p)) == 15
    fetched = (  # rows read from the heap in this transaction, by any scan of any partition
        "SELECT coalesce(sum(coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0)), 0) FROM pg_stat_xact_user_tables "
        "WHERE relid IN (SELECT relid FROM pg_partition_tree('episodes'))"
    )
    with app.state.sessions() as db:
        bind_principal(db, p)
        before = db.execute(text(fetched)).scalar()
        assert len(db.execute(text(HITS)).scalars().all()) == 15
        read = db.execute(text(fetched)).scalar() - before
        db.rollback()
    assert read < 200, read
