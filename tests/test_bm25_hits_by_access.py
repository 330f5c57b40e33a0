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
    (the text index alone gave every row holding the word, each read to test its access): its
    statement, run on the caller's settings, drops fewer than 200 rows it read."""
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
    with app.state.sessions() as db:  # the caller's settings, as the function reads them
        bind_principal(db, p)
        bound = {k: db.execute(text("SELECT current_setting(:k)"), {"k": k}).scalar() for k in SETTINGS}
        db.rollback()
    with admin_engine.connect() as c:  # the function's own statement, run as its owner on those settings
        for k, v in bound.items():
            c.execute(text("SELECT set_config(:k, :v, true)"), {"k": k, "v": v})
        body = c.execute(text("SELECT prosrc FROM pg_proc WHERE proname = 'bm25_hits_episode'")).scalar()
        body = body.replace("tsv @@ q", "tsv @@ to_tsquery('english', 'pottery')")
        plan = c.execute(text("EXPLAIN (ANALYZE, FORMAT JSON) " + body)).scalar()
        c.rollback()
    assert _returned(plan[0]["Plan"]) == 15
    assert _read_not_returned(plan[0]["Plan"]) < 200


SETTINGS = ("memscale.org_id", "memscale.user_id", "memscale.groups", "memscale.clearances", "memscale.scope")


def _scans(node: dict):
    if node["Node Type"].endswith("Scan") and "Relation Name" in node:
        yield node
    for child in node.get("Plans", ()):
        yield from _scans(child)


def _returned(plan: dict) -> int:
    return sum(n["Actual Rows"] * n["Actual Loops"] for n in _scans(plan))


def _read_not_returned(plan: dict) -> float:
    """Rows the table scans read and dropped (their filter or an index recheck)."""
    return sum(
        (n.get("Rows Removed by Filter", 0) + n.get("Rows Removed by Index Recheck", 0)) * n["Actual Loops"] for n in _scans(plan)
    )
