"""BM25's statistics kept per visibility bucket (migration 0024, app/search/repository/bm25_stats.py):
the kept counts equal a recount from scratch after any sequence of writes; the index-driven,
pruned top-n equals the exact statement's, scores bit-equal; rows a caller may not see never
change their ranking."""

from __future__ import annotations

import random
import uuid

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from app.kit.database.pg import app_url

VOCAB = [
    "pottery",
    "sweden",
    "deploy",
    "cache",
    "cold",
    "river",
    "violin",
    "garden",
    "tax",
    "invoice",
    "camping",
    "painting",
    "sunset",
    "marathon",
    "piano",
    "adoption",
    "museum",
    "lake",
    "bread",
    "kitten",
]
GROUPS, LABELS = ["a", "b"], ["x"]

# A row served by default, its bucket and its lexemes, recounted from the item tables.
SERVED = {
    "memory": ("memories", "text", "status = 'active'"),
    "episode": ("episodes", "content", "quality IS DISTINCT FROM 'quarantined'"),
}
BUCKET = (
    "CASE WHEN visibility = 'private' THEN 'u:' || owner_id::text WHEN visibility = 'org' THEN 'o:' || labels::text "
    "ELSE 'g:' || groups::text || '|' || labels::text END"
)


def _setup(admin_engine, settings, users=3):
    from app.orgs import service as orgs

    with Session(admin_engine, info={"audit_key": settings.audit_secret()}) as db:
        org = orgs.create_org(db, f"bm25-{uuid.uuid4().hex[:8]}")
        ids = [orgs.create_user(db, org, f"u{i}").id for i in range(users)]
        branch = uuid.uuid4()
        db.execute(
            text("INSERT INTO branches (org_id, id, name, fork_at) VALUES (:o, :b, 'b1', now())"), {"o": org.id, "b": branch}
        )
        db.commit()
        return org.id, ids, branch


def org_document(c, org, owner, name: str):
    """An org-visible document asset (`mem://<name>`) for chunks to hang on; its id."""
    return c.execute(
        text(
            "INSERT INTO knowledge_assets (org_id, owner_id, kind, source_uri, content_hash, visibility)"
            " VALUES (:o, :u, 'document', :uri, :name, 'org') RETURNING id"
        ),
        {"o": org, "u": owner, "uri": f"mem://{name}", "name": name},
    ).scalar_one()


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(rng.randint(1, 6)))


def _insert(c, org, rng, owners, n, *, branch=None):
    """n memories and n episodes of random scope, text and state, one statement per table."""
    rows = [
        {
            "o": org,
            "u": str(rng.choice(owners)),
            "t": _text(rng),
            "v": rng.choice(["private", "group", "org"]),
            "g": rng.sample(GROUPS, rng.randint(0, 2)),
            "l": rng.sample(LABELS, rng.randint(0, 1)),
            "s": rng.choice(["active", "active", "superseded", "quarantined"]),
            "q": rng.choice([None, None, "ok", "quarantined"]),
            "b": branch if rng.random() < 0.2 else None,
        }
        for _ in range(n)
    ]
    c.execute(
        text(
            "INSERT INTO memories (root_id, text, kind, org_id, owner_id, visibility, groups, labels, status, branch_id) "
            "SELECT gen_random_uuid(), x->>'t', 'fact', (x->>'o')::uuid, (x->>'u')::uuid, x->>'v', "
            "ARRAY(SELECT jsonb_array_elements_text(x->'g')), ARRAY(SELECT jsonb_array_elements_text(x->'l')), "
            "x->>'s', (x->>'b')::uuid FROM jsonb_array_elements(CAST(:rows AS jsonb)) x"
        ),
        {"rows": _json(rows)},
    )
    c.execute(
        text(
            "INSERT INTO episodes (kind, content, org_id, owner_id, visibility, groups, labels, quality, branch_id) "
            "SELECT 'note', x->>'t', (x->>'o')::uuid, (x->>'u')::uuid, x->>'v', "
            "ARRAY(SELECT jsonb_array_elements_text(x->'g')), ARRAY(SELECT jsonb_array_elements_text(x->'l')), "
            "x->>'q', (x->>'b')::uuid FROM jsonb_array_elements(CAST(:rows AS jsonb)) x"
        ),
        {"rows": _json(rows)},
    )


def _json(rows: list) -> str:
    import json

    return json.dumps([{k: (str(v) if isinstance(v, uuid.UUID) else v) for k, v in r.items()} for r in rows])


def _some(table: str, share: float) -> str:
    return f"(SELECT id FROM {table} WHERE org_id = :o AND random() < {share})"


OPS = {
    "retext": [
        "UPDATE memories SET text = text || ' lake' WHERE org_id = :o AND id IN " + _some("memories", 0.3),
        "UPDATE episodes SET content = 'bread ' || content WHERE org_id = :o AND id IN " + _some("episodes", 0.3),
    ],
    "narrow": [
        "UPDATE memories SET visibility = 'group', groups = '{b}', labels = '{x}' WHERE org_id = :o AND id IN "
        + _some("memories", 0.3),
        "UPDATE episodes SET visibility = 'private' WHERE org_id = :o AND id IN " + _some("episodes", 0.3),
    ],
    "declassify": ["UPDATE memories SET labels = '{}', visibility = 'org' WHERE org_id = :o AND id IN " + _some("memories", 0.3)],
    "supersede": [
        "UPDATE memories SET status = 'superseded', superseded_at = now() WHERE org_id = :o AND status = 'active' "
        "AND id IN " + _some("memories", 0.3)
    ],
    "quarantine": [
        "UPDATE episodes SET quality = 'quarantined' WHERE org_id = :o AND id IN " + _some("episodes", 0.3),
        "UPDATE memories SET status = 'quarantined' WHERE org_id = :o AND id IN " + _some("memories", 0.2),
    ],
    "touch": [
        "UPDATE memories SET confidence = 0.5 WHERE org_id = :o",
        "UPDATE episodes SET quality = 'ok' WHERE org_id = :o AND quality IS NULL AND id IN " + _some("episodes", 0.5),
    ],
    "merge": ["UPDATE episodes SET branch_id = NULL WHERE org_id = :o AND branch_id IS NOT NULL"],
    "erase": [  # one owner's rows of both types, as erasure deletes them
        "DELETE FROM memories WHERE org_id = :o AND owner_id = "
        "(SELECT min(owner_id::text)::uuid FROM memories WHERE org_id = :o)",
        "DELETE FROM episodes WHERE org_id = :o AND owner_id = "
        "(SELECT min(owner_id::text)::uuid FROM episodes WHERE org_id = :o)",
    ],
    "delete": [
        "DELETE FROM memories WHERE org_id = :o AND id IN " + _some("memories", 0.25),
        "DELETE FROM episodes WHERE org_id = :o AND id IN " + _some("episodes", 0.25),
    ],
}


def _kept_equals_recount(c, org) -> None:
    for type_, (table, _col, served) in SERVED.items():
        rows = (
            f"SELECT {BUCKET} AS bucket, owner_id, visibility, groups, labels, tsv FROM {table} "
            f"WHERE org_id = :o AND branch_id IS NULL AND {served}"
        )
        q = {"o": org, "t": type_}
        want = set(c.execute(text(f"SELECT bucket, count(*), sum(length(tsv)) FROM ({rows}) x GROUP BY bucket"), q).all())
        got = set(
            c.execute(
                text(
                    "SELECT bucket, sum(n), sum(total_len) FROM bm25_buckets WHERE org_id = :o AND item_type = :t "
                    "GROUP BY bucket HAVING sum(n) <> 0 OR sum(total_len) <> 0"
                ),
                q,
            ).all()
        )
        assert got == want, type_
        want = set(
            c.execute(
                text(f"SELECT bucket, lex, count(*) FROM ({rows}) x, unnest(tsvector_to_array(tsv)) lex GROUP BY bucket, lex"), q
            ).all()
        )
        got = set(
            c.execute(
                text(
                    "SELECT bucket, lexeme, sum(df) FROM bm25_df WHERE org_id = :o AND item_type = :t "
                    "GROUP BY bucket, lexeme HAVING sum(df) <> 0"
                ),
                q,
            ).all()
        )
        assert got == want, type_
        want = set(
            c.execute(
                text(
                    f"SELECT owner_id, visibility, groups::text, labels::text, count(*) FROM ({rows}) x "
                    "WHERE visibility <> 'private' GROUP BY 1, 2, 3, 4"
                ),
                q,
            ).all()
        )
        got = set(
            c.execute(
                text(
                    "SELECT owner_id, visibility, groups::text, labels::text, sum(n) FROM bm25_owned WHERE org_id = :o "
                    "AND item_type = :t GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0"
                ),
                q,
            ).all()
        )
        assert got == want, type_
        where = f"FROM {table} WHERE org_id = :o AND branch_id IS NULL AND {served}"
        ids = (  # each row in its bucket, and a shared row also in its owner's copy of it
            f"SELECT id, {BUCKET} AS bucket, tsv {where} UNION ALL "
            f"SELECT id, 'w:' || owner_id::text || '|' || {BUCKET}, tsv {where} AND visibility <> 'private'"
        )
        want = set(c.execute(text(f"SELECT bucket, lex, id FROM ({ids}) x, unnest(tsvector_to_array(tsv)) lex"), q).all())
        got = c.execute(
            text(
                "SELECT i.bucket, p.lexeme, p.id FROM bm25_postings p JOIN bm25_bucket_ids i"
                " ON i.org_id = p.org_id AND i.bid = p.bid "
                "WHERE p.org_id = :o AND i.org_id = :o AND i.item_type = :t"
            ),
            q,
        ).all()
        assert len(got) == len(set(got)) and set(got) == want, type_  # the postings: exactly the rows' lexemes


def _principal(org, uid, groups=(), clearances=()):
    from app.auth.principal import Principal

    return Principal(org_id=org, user_id=uid, name="p", roles=("member",), groups=tuple(groups), clearances=tuple(clearances))


def _both(app, p, type_, query, n=50):
    """(kept path, exact path): each (top-n, N)."""
    from app.kit.database.db import bind_principal
    from app.search.repository import bm25
    from app.search.schemas import SearchFilters

    with app.state.sessions() as db:
        bind_principal(db, p)
        kept = bm25.text_scored(db, p, type_, query, SearchFilters(), n)
        exact = bm25.text_scored(db, p, type_, query, SearchFilters(), n, exact=True)
        db.rollback()
    return kept, exact


@hsettings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6), ops=st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=6))
def test_kept_statistics_equal_a_recount_after_any_writes(app, client, admin_engine, settings, seed, ops):
    from app.search.repository import bm25_stats
    from app.search.schemas import SearchFilters

    rng = random.Random(seed)
    org, (*users, reader), branch = _setup(admin_engine, settings, users=4)  # the reader owns nothing
    with admin_engine.begin() as c:
        _insert(c, org, rng, users, 40, branch=branch)
    for op in ops:
        with admin_engine.begin() as c:
            c.execute(text("SELECT setseed(:s)"), {"s": rng.random()})
            for sql in OPS[op]:
                c.execute(text(sql), {"o": org})
            if rng.random() < 0.5:
                _insert(c, org, rng, users, rng.randint(1, 10), branch=branch)
        with admin_engine.connect() as c:
            _kept_equals_recount(c, org)
    for _ in range(3):  # random principals: the kept path answers exactly what the exact path does
        p = _principal(
            org, rng.choice(users + [reader] * 3), rng.sample(GROUPS, rng.randint(0, 2)), rng.sample(LABELS, rng.randint(0, 1))
        )
        query = " ".join(rng.sample(VOCAB, rng.randint(1, 5)))
        for type_ in SERVED:
            kept, exact = _both(app, p, type_, query)
            assert kept == exact, (type_, query)
            assert bm25_stats.served_by_stats(p, type_, SearchFilters())


def test_an_owners_shared_rows_no_bucket_gives_them_are_counted(app, client, admin_engine, settings):
    from app.kit.database.db import bind_principal
    from app.search.repository import bm25_stats

    org, (alice, bob, _), _ = _setup(admin_engine, settings)
    with admin_engine.begin() as c:  # alice's rows shared with a group she is not in, under a label she lacks
        c.execute(
            text(
                "INSERT INTO episodes (kind, content, org_id, owner_id, visibility, groups, labels) VALUES "
                "('note', 'pottery in sweden', :o, :a, 'group', '{b}', '{x}'), ('note', 'pottery', :o, :b, 'org', '{}', '{}')"
            ),
            {"o": org, "a": alice, "b": bob},
        )
    p = _principal(org, alice, groups=["a"])
    with app.state.sessions() as db:
        bind_principal(db, p)
        assert bm25_stats.caller_stats(db, p, "episode", ["potteri", "sweden", "violin"]) == (2, [2, 1, 0])
        db.rollback()
    kept, exact = _both(app, p, "episode", "pottery sweden")
    assert kept == exact and exact[1] == 2 and len(exact[0]) == 2


@pytest.fixture(autouse=True)
def _kept_path_at_any_size(monkeypatch):
    """These corpora are small: the kept path is taken whatever the caller's N."""
    from app.search.repository import bm25_stats

    monkeypatch.setattr(bm25_stats, "KEPT_FROM", 0)


@pytest.fixture(scope="module")
def seeded(app, client, admin_engine, settings):
    """An org of 6 writers and 3 readers, 3000 memories and 3000 episodes of a Zipf-like vocabulary
    and random scopes."""
    org, users, _ = _setup(admin_engine, settings, users=9)
    rng = random.Random(7)
    weights = [1 / (i + 1) for i in range(len(VOCAB))]
    with admin_engine.begin() as c:
        for _ in range(6):
            rows = [
                {
                    "o": org,
                    "u": str(rng.choice(users[:6])),
                    "t": " ".join(rng.choices(VOCAB, weights, k=rng.randint(2, 9))),
                    "v": rng.choice(["private", "group", "org", "org"]),
                    "g": rng.sample(GROUPS, rng.randint(1, 2)),
                    "l": rng.sample(LABELS, rng.randint(0, 1)) if rng.random() < 0.3 else [],
                    "s": "active" if rng.random() < 0.9 else "superseded",
                    "q": None,
                    "b": None,
                }
                for _ in range(500)
            ]
            for table, col, extra in (("memories", "text", "status"), ("episodes", "content", "quality")):
                c.execute(
                    text(
                        f"INSERT INTO {table} ({'root_id, ' if table == 'memories' else ''}{col}, kind, org_id, owner_id, "
                        f"visibility, groups, labels, {extra}) SELECT {'gen_random_uuid(), ' if table == 'memories' else ''}"
                        f"x->>'t', '{'fact' if table == 'memories' else 'note'}', (x->>'o')::uuid, (x->>'u')::uuid, x->>'v', "
                        "ARRAY(SELECT jsonb_array_elements_text(x->'g')), ARRAY(SELECT jsonb_array_elements_text(x->'l')), "
                        f"x->>'{'s' if table == 'memories' else 'q'}' FROM jsonb_array_elements(CAST(:rows AS jsonb)) x"
                    ),
                    {"rows": _json(rows)},
                )
    return org, users


@pytest.mark.parametrize("n", [10, 50, 100])
@pytest.mark.parametrize("flat", [False, True], ids=["maxscore", "flat"])
def test_the_postings_top_n_equals_the_exact_ranking(app, seeded, n, flat, monkeypatch):
    """Both forms of the kept top n (MaxScore, and the one aggregate below FLAT_UP_TO postings)."""
    from app.search.repository import bm25_stats

    org, users = seeded
    rng = random.Random(n)
    kept_calls, top = [], bm25_stats.top_scored  # (essential lexemes, lexemes held) of each kept call
    monkeypatch.setattr(bm25_stats, "FIRST_ROWS", 60)  # this small corpus's rarest lexemes: theta from a few
    monkeypatch.setattr(bm25_stats, "FLAT_UP_TO", 10**9 if flat else 0)
    monkeypatch.setattr(bm25_stats, "top_scored", lambda *a, **kw: top(*a, **kw, essential=kept_calls))
    for i in range(12):  # readers of random groups and clearances; writers in at most one group
        p = (
            _principal(org, users[6 + i % 3], rng.sample(GROUPS, rng.randint(0, 2)), rng.sample(LABELS, rng.randint(0, 1)))
            if i % 2
            else _principal(org, users[i % 6], rng.sample(GROUPS, rng.randint(0, 1)), LABELS)  # owns rows it cannot see
        )
        query = " ".join(rng.sample(VOCAB, rng.randint(1, 8)))
        for type_ in SERVED:
            kept, exact = _both(app, p, type_, query, n=n)
            assert kept == exact, (type_, query)
            assert len(exact[0]) == n  # a full top-n
    assert len(kept_calls) == 24
    if flat:  # every lexeme's postings read, none probed
        assert all(e == held for e, held in kept_calls), kept_calls
    else:
        assert any(e < held for e, held in kept_calls), kept_calls  # some postings left unread


UNSEEN = {
    "episode": "INSERT INTO episodes (kind, content, org_id, owner_id, visibility, groups) "
    "SELECT 'note', :w, :o, :u, 'group', '{c}' FROM generate_series(1, 10000)",
    "memory": "INSERT INTO memories (root_id, kind, text, org_id, owner_id, visibility, groups) "
    "SELECT gen_random_uuid(), 'fact', :w, :o, :u, 'group', '{c}' FROM generate_series(1, 10000)",
}


def unseen_rows(admin_engine, settings, org, owner, types=("episode", "memory")):
    """10,000 rows of each of `types` holding every VOCAB word, in group c (which the callers of these
    tests are not in), in `org` (owned by `owner`) and in a new org; returns the new org."""
    other, (stranger, *_), _ = _setup(admin_engine, settings)
    words = " ".join(VOCAB)
    with admin_engine.begin() as c:
        for o, u in ((org, owner), (other, stranger)):
            for t in types:
                c.execute(text(UNSEEN[t]), {"w": words, "o": o, "u": u})
    return other


def test_rows_a_caller_cannot_see_never_change_their_ranking(app, admin_engine, settings, seeded):
    org, users = seeded
    p = _principal(org, users[6], groups=["a"])
    queries = ["pottery sweden deploy", "violin lake bread", "kitten adoption museum marathon"]
    before = {(t, q): _both(app, p, t, q) for t in SERVED for q in queries}
    other = unseen_rows(admin_engine, settings, org, users[7])
    with admin_engine.connect() as c:  # each of those rows is in the postings the text top-n reads, in both orgs
        posted = c.execute(
            text(
                "SELECT p.org_id, i.item_type, count(DISTINCT p.id) FROM bm25_postings p JOIN bm25_bucket_ids i"
                " ON i.org_id = p.org_id AND i.bid = p.bid "
                "WHERE i.bucket = 'g:{c}|{}' GROUP BY 1, 2"
            )
        ).all()
    assert {(o, t): k for o, t, k in posted if o in (org, other)} == {
        (o, t): 10_000 for o in (org, other) for t in ("episode", "memory")
    }
    after = {(t, q): _both(app, p, t, q) for t in SERVED for q in queries}
    assert repr(after) == repr(before)
    assert all(kept == exact and kept[0] for kept, exact in after.values())


def test_the_text_index_lookup_returns_only_what_the_policy_lets_the_caller_see(app, client, admin_engine, settings):
    """bm25_hits_<type> runs as the table's owner (the text index is usable only there): it must
    apply the row-level policy's rule itself, on the caller's settings."""
    from app.kit.database.db import bind_principal

    org, (alice, bob, carol), _ = _setup(admin_engine, settings)
    other, (stranger, *_), _ = _setup(admin_engine, settings)
    with admin_engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO episodes (kind, content, org_id, owner_id, visibility, groups, labels) VALUES "
                "('note', 'pottery a', :o, :a, 'private', '{}', '{}'), ('note', 'pottery b', :o, :b, 'private', '{}', '{}'), "
                "('note', 'pottery c', :o, :b, 'group', '{a}', '{}'), ('note', 'pottery d', :o, :b, 'group', '{b}', '{}'), "
                "('note', 'pottery e', :o, :b, 'org', '{}', '{x}'), ('note', 'pottery f', :o, :b, 'org', '{}', '{}'), "
                "('note', 'pottery g', :x, :s, 'org', '{}', '{}')"
            ),
            {"o": org, "a": alice, "b": bob, "x": other, "s": stranger},
        )
    with admin_engine.connect() as c:  # what the function returned, read back as the owner

        def seen(p) -> list:
            with app.state.sessions() as db:
                bind_principal(db, p)
                ids = db.execute(text("SELECT id FROM bm25_hits_episode(to_tsquery('english', 'pottery'))")).scalars().all()
                # the same question asked of the table under its row-level policy: a policy changed
                # later without the function (which copies its rule) fails here
                policed = db.execute(
                    text(
                        "SELECT id FROM episodes WHERE tsv @@ to_tsquery('english', 'pottery') AND branch_id IS NULL "
                        "AND quality IS DISTINCT FROM 'quarantined'"
                    )
                ).scalars()
                assert sorted(ids) == sorted(policed)
                db.rollback()
            return c.execute(text("SELECT content FROM episodes WHERE id = ANY(:ids) ORDER BY 1"), {"ids": ids}).scalars().all()

        assert seen(_principal(org, alice, groups=["a"])) == ["pottery a", "pottery c", "pottery f"]
        assert seen(_principal(org, carol, groups=["b"], clearances=["x"])) == ["pottery d", "pottery e", "pottery f"]
        assert seen(_principal(other, stranger)) == ["pottery g"]
    eng = create_engine(app_url(settings))
    with eng.connect() as c:  # no tenant settings: nothing
        assert c.execute(text("SELECT count(*) FROM bm25_hits_episode(to_tsquery('english', 'pottery'))")).scalar() == 0
    eng.dispose()


@pytest.mark.parametrize("n_terms", [1, 3, 6])
def test_the_second_rounds_words_and_rows_from_the_kept_statistics_equal_the_exact_ones(app, seeded, n_terms, monkeypatch):
    """Context's second round (app/search/repository/expansion.py) on the kept path chooses the
    same rarest words (ties in df broken by the word, as the one-pass statement does) and returns
    the same rows, scores, distances and order as the one pass over every visible row."""
    from app.kit.database.db import bind_principal
    from app.search.repository import bm25_stats, expansion
    from app.search.schemas import SearchFilters

    org, users = seeded
    rng = random.Random(100 + n_terms)
    kept_calls, top = [], bm25_stats.top_scored  # (essential lexemes, lexemes held) of each kept call
    monkeypatch.setattr(bm25_stats, "FIRST_ROWS", 60)  # this small corpus's rarest lexemes: theta from a few
    monkeypatch.setattr(bm25_stats, "FLAT_UP_TO", 0)  # MaxScore, whatever the postings
    monkeypatch.setattr(bm25_stats, "top_scored", lambda *a, **kw: top(*a, **kw, essential=kept_calls))
    qvec = [0.0] * 384
    qvec[0] = 1.0
    found = 0
    for i in range(8):
        p = _principal(org, users[6 + i % 3], rng.sample(GROUPS, rng.randint(0, 2)), rng.sample(LABELS, rng.randint(0, 1)))
        query = " ".join(rng.sample(VOCAB, 2))
        with app.state.sessions() as db:
            bind_principal(db, p)
            hits = [
                r.id
                for r in db.execute(
                    text("SELECT id FROM episodes WHERE org_id = :o ORDER BY md5(id::text || :s) LIMIT 5"),
                    {"o": org, "s": str(i)},
                )
            ]
            args = dict(hit_ids=hits, query=query, qvec=qvec, n_terms=n_terms, n=40)
            kept = expansion.expansion_rows(db, p, "episode", SearchFilters(), **args)
            monkeypatch.setattr(bm25_stats, "KEPT_FROM", 10**9)  # the one-pass statement
            exact = expansion.expansion_rows(db, p, "episode", SearchFilters(), **args)
            monkeypatch.setattr(bm25_stats, "KEPT_FROM", 0)
            db.rollback()
        assert [tuple(r) for r in kept] == [tuple(r) for r in exact], (query, n_terms)
        found += len(exact)
    assert found > 0 and len(kept_calls) == 8  # rows came back, and every kept call took the index-driven path


def _scans_of(plan: dict, relation: str) -> list[dict]:
    here = [plan] if plan.get("Relation Name") == relation else []
    return here + [n for child in plan.get("Plans", ()) for n in _scans_of(child, relation)]


def test_each_lexemes_df_is_probed_by_the_whole_key_while_the_row_estimates_are_stale(app, client, admin_engine, settings):
    """An org's first rows of a type are not in bm25_df's statistics until it is analysed again:
    the caller's df must still be read by lexeme (every key column in the index condition), not
    by a pass over every lexeme of the org's type."""
    import json

    from sqlalchemy import event

    from app.kit.database.db import bind_principal
    from app.search.repository import bm25_stats

    org, (alice, *_), _ = _setup(admin_engine, settings)
    rng = random.Random(5)
    with admin_engine.begin() as c:
        c.execute(text("ANALYZE bm25_df"))
        asset = org_document(c, org, alice, "stale")
        words = [f"w{i}x{rng.randrange(10**6)}" for i in range(3000)]
        c.execute(
            text(
                "INSERT INTO chunks (org_id, asset_id, owner_id, visibility, ord, text, content_hash, token_count)"
                " SELECT :o, :a, :u, 'org', i, w || ' pottery', md5(w), 2 FROM unnest(CAST(:w AS text[])) WITH ORDINALITY t(w, i)"
            ),
            {"o": org, "a": asset, "u": alice, "w": words},
        )
    p = _principal(org, alice)
    sent: list = []
    with app.state.sessions() as db:
        bind_principal(db, p)
        bind = db.connection().engine

        def keep(conn, cursor, statement, params, context, executemany):
            sent.append((statement, params))

        event.listen(bind, "before_cursor_execute", keep)
        try:
            assert bm25_stats.caller_stats(db, p, "chunk", ["potteri", words[0]]) == (3000, [3000, 1])
        finally:
            event.remove(bind, "before_cursor_execute", keep)
        statement, params = next(s for s in sent if "bm25_df" in s[0])
        cur = db.connection().connection.cursor()
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
        plan = cur.fetchone()[0]
        db.rollback()
    plan = plan if isinstance(plan, list) else json.loads(plan)
    scans = _scans_of(plan[0]["Plan"], "bm25_df")
    assert scans and all("lexeme" in s.get("Index Cond", "") for s in scans), scans
    assert sum(s["Actual Rows"] * s.get("Actual Loops", 1) for s in scans) <= 10
