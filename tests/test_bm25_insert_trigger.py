"""The INSERT branch of the statistics' triggers (migration 0034): an insert-only statement keeps
the buckets, df, owners' counts, bucket ids and postings exactly as 0033's netted statement did,
with no netting; the downgrade puts 0033's functions back. tests/test_bm25_stats.py recounts
the statistics from scratch after random sequences of inserts, updates and deletes."""

from __future__ import annotations

import json
import random
import uuid

from sqlalchemy import text

from tests.helpers import scratch_database
from tests.test_bm25_stats import VOCAB, _setup

GROUPS, LABELS = ["a", "b", "c"], ["x", "y"]
FUNCTIONS = ("bm25_keep_memory", "bm25_keep_episode", "bm25_keep_chunk")


def _rows(rng: random.Random, org, owners, branch, n: int) -> str:
    """n rows of random scope, text and served state, with ids drawn from `rng` (both runs insert
    the same rows)."""
    return json.dumps(
        [
            {
                "i": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "o": str(org),
                "u": str(rng.choice(owners)),
                "t": " ".join(rng.choice(VOCAB) for _ in range(rng.randint(1, 8))),
                "v": rng.choice(["private", "group", "org"]),
                "g": rng.sample(GROUPS, rng.randint(0, 2)),
                "l": rng.sample(LABELS, rng.randint(0, 1)),
                "s": rng.choice(["active", "active", "superseded", "quarantined"]),
                "q": rng.choice([None, None, "ok", "quarantined"]),
                "b": str(branch) if rng.random() < 0.15 else None,
            }
            for _ in range(n)
        ]
    )


SCOPE = (
    "(x->>'o')::uuid, (x->>'u')::uuid, x->>'v', ARRAY(SELECT jsonb_array_elements_text(x->'g')), "
    "ARRAY(SELECT jsonb_array_elements_text(x->'l'))"
)
INSERTS = (
    "INSERT INTO memories (id, root_id, text, kind, org_id, owner_id, visibility, groups, labels, status, branch_id) "
    f"SELECT (x->>'i')::uuid, (x->>'i')::uuid, x->>'t', 'fact', {SCOPE}, x->>'s', (x->>'b')::uuid "
    "FROM jsonb_array_elements(CAST(:rows AS jsonb)) x",
    "INSERT INTO episodes (id, kind, content, org_id, owner_id, visibility, groups, labels, quality, branch_id) "
    f"SELECT (x->>'i')::uuid, 'note', x->>'t', {SCOPE}, x->>'q', (x->>'b')::uuid "
    "FROM jsonb_array_elements(CAST(:rows AS jsonb)) x",
)

# What the kept tables hold for one org; a bucket id is named by its bucket and ranked by its
# value (ids come from one sequence, so two runs differ by an offset only).
SNAPSHOT = {
    "buckets": "SELECT item_type, bucket, shard, owner_id, visibility, groups, labels, n, total_len "
    "FROM bm25_buckets WHERE org_id = :o ORDER BY 1, 2, 3",
    "df": "SELECT item_type, bucket, lexeme, shard, df FROM bm25_df WHERE org_id = :o ORDER BY 1, 2, 3, 4",
    "owned": "SELECT item_type, owner_id, visibility, groups, labels, shard, n FROM bm25_owned WHERE org_id = :o "
    "ORDER BY 1, 2, 3, 4, 5, 6",
    "bucket_ids": "SELECT item_type, bucket, rank() OVER (ORDER BY bid) FROM bm25_bucket_ids WHERE org_id = :o ORDER BY 3",
    "postings": "SELECT i.item_type, i.bucket, p.lexeme, p.id FROM bm25_postings p JOIN bm25_bucket_ids i "
    "ON i.org_id = p.org_id AND i.bid = p.bid WHERE p.org_id = :o ORDER BY 1, 2, 3, 4",
}


def _functions(c) -> dict:
    got = dict(c.execute(text("SELECT proname, prosrc FROM pg_proc WHERE proname = ANY(:f)"), {"f": list(FUNCTIONS)}).all())
    c.rollback()
    return got


def _run(c, org, users, branch) -> dict:
    """Insert statements of 1 to 300 rows (new buckets appearing in later ones, one statement of
    branch rows only), snapshot the kept tables, roll back."""
    rng = random.Random(7)
    for size, owners in ((1, users[:1]), (25, users[:2]), (300, users), (7, users), (40, users[1:])):
        for sql in INSERTS:
            c.execute(text(sql), {"rows": _rows(rng, org, owners, branch, size)})
    only_branch = json.loads(_rows(rng, org, users, branch, 10))
    for r in only_branch:
        r["b"] = str(branch)
    c.execute(text(INSERTS[1]), {"rows": json.dumps(only_branch)})
    c.execute(text("UPDATE memories SET status = 'active' WHERE org_id = :o AND status = 'superseded'"), {"o": org})
    for sql in INSERTS:  # inserts after an update, into buckets that all have ids
        c.execute(text(sql), {"rows": _rows(rng, org, users, branch, 30)})
    got = {k: c.execute(text(q), {"o": org}).all() for k, q in SNAPSHOT.items()}
    c.rollback()
    return got


def test_inserts_keep_exactly_what_0033s_triggers_kept(settings):
    from app.kit.database.migrate import downgrade, upgrade

    with scratch_database(settings, "memscale_bm25_insert") as (s, eng):
        upgrade(s, "0033")
        org, users, branch = _setup(eng, s, users=4)
        with eng.connect() as c:  # one backend for both runs: the same shard
            at_0033 = _functions(c)
            before = _run(c, org, users, branch)
            upgrade(s, "0034")
            assert all(_functions(c)[f] != at_0033[f] for f in FUNCTIONS)
            after = _run(c, org, users, branch)
            downgrade(s, "0033")
            assert _functions(c) == at_0033
    assert before["postings"] and before["df"] and before["owned"] and len(before["bucket_ids"]) > 10
    assert {k: len(v) for k, v in after.items()} == {k: len(v) for k, v in before.items()}
    assert after == before


def test_an_insert_statement_nets_nothing(admin_engine):
    """The INSERT branch inserts the postings and counts; netting and deletes stay in UPDATE's and DELETE's."""
    with admin_engine.connect() as c:
        for name, src in _functions(c).items():
            insert, rest = src.split("ELSIF TG_OP = 'UPDATE'")
            assert "INSERT INTO bm25_postings" in insert and "count(*)" in insert, name
            assert "HAVING" not in insert and "DELETE" not in insert and "sum(s)" not in insert, name
            assert "DELETE FROM bm25_postings" in rest and "HAVING sum(s) <> 0" in rest, name
