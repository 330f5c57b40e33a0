"""`memscale admin import` of knowledge assets beside episodes, and the erasure of what it wrote."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

TABLES = ("episodes", "knowledge_assets", "chunks", "lineage_edges", "audit_log", "lexicon")

LINES = [
    {"kind": "note", "content": "the glacier camera froze at dawn"},
    {
        "type": "asset",
        "kind": "document",
        "uri": "wiki:cameras",
        "title": "Cameras",
        "chunks": ["The glacier camera restarts itself at noon.", "Its lens heater draws forty watts in winter."],
    },
    {"type": "episode", "kind": "note", "content": "ops rotated the harbour keys", "visibility": "org"},
    {
        "type": "asset",
        "kind": "glossary",
        "uri": "glossary:ops",
        "chunks": ["harbour key: the ssh key of the harbour bastion"],
        "visibility": "group",
        "groups": ["ops"],
    },
]


def _counts(engine, org_id) -> dict:
    with engine.connect() as c:
        return {t: c.execute(text(f"SELECT count(*) FROM {t} WHERE org_id = :o"), {"o": org_id}).scalar() for t in TABLES}


def _bm25(engine, org_id) -> dict:
    with engine.connect() as c:
        return {
            t: c.execute(
                text(f"SELECT coalesce(sum(n), 0) FROM bm25_buckets WHERE org_id = :o AND item_type = '{t}'"), {"o": org_id}
            ).scalar()
            for t in ("episode", "chunk")
        } | {
            # each counter is split over shards (a row added by one connection and removed by another
            # leaves +1 and -1): a lexeme's df is its sum over the shards
            "df": c.execute(
                text(
                    "SELECT coalesce(sum(abs(s)), 0) FROM (SELECT sum(df) AS s FROM bm25_df WHERE org_id = :o"
                    " GROUP BY item_type, bucket, lexeme) x"
                ),
                {"o": org_id},
            ).scalar()
        }


def _import(app, principal, embedder, lines):
    from app.episodes import bulk
    from app.kit.database.db import bind_principal, transaction

    with transaction(app.state.sessions) as db:
        bind_principal(db, principal)
        return bulk.import_items(db, embedder, principal, bulk.parse_lines([json.dumps(x) for x in lines]))


def _principal(admin_engine, org, name):
    from app.episodes import bulk

    with Session(admin_engine) as db:
        return bulk.principal_of(db, org, name)


def test_import_takes_assets_beside_episodes(app, world, admin_engine, embedder, client):
    org = world.org()
    alice = world.user(org, "alice", groups=("ops",))
    bob = world.user(org, "bob")
    ids = _import(app, _principal(admin_engine, org, "alice"), embedder, LINES)
    assert len(ids) == 4
    n = _counts(admin_engine, alice.org_id)
    assert (n["episodes"], n["knowledge_assets"], n["chunks"]) == (2, 2, 3)
    with admin_engine.connect() as c:
        assets = c.execute(
            text("SELECT id, kind, source_uri, owner_id, visibility, groups FROM knowledge_assets WHERE org_id = :o"),
            {"o": alice.org_id},
        ).all()
        edges = c.execute(
            text("SELECT count(*) FROM lineage_edges WHERE org_id = :o AND relation = 'chunk_of'"), {"o": alice.org_id}
        ).scalar()
        actions = sorted(
            r[0]
            for r in c.execute(
                text("SELECT action FROM audit_log WHERE org_id = :o AND (action LIKE 'asset.%' OR action LIKE 'episode.%')"),
                {"o": alice.org_id},
            ).all()
        )
    by_uri = {a.source_uri: a for a in assets}
    assert {by_uri["wiki:cameras"].id, by_uri["glossary:ops"].id} == {ids[1], ids[3]}
    assert all(a.owner_id == alice.user_id for a in assets)
    assert (by_uri["glossary:ops"].visibility, by_uri["glossary:ops"].groups) == ("group", ["ops"])
    assert edges == 3
    assert actions == ["asset.created", "asset.created", "asset.import", "episode.import"]
    assert _bm25(admin_engine, alice.org_id)["chunk"] == 3  # the statistics triggers saw the set-based chunks
    hits = client.post("/v1/search", json={"query": "lens heater watts", "types": ["chunk"]}, headers=alice.h).json()
    assert "forty watts" in hits["results"][0]["text"]
    other = client.post("/v1/search", json={"query": "lens heater watts", "types": ["chunk"]}, headers=bob.h).json()
    assert other["results"] == []  # alice's private asset


def test_an_asset_line_shared_into_a_foreign_group_refuses_the_file(app, world, admin_engine, embedder):
    from app.kit.errors import AppError

    org = world.org()
    alice = world.user(org, "alice")  # not in ops
    before = _counts(admin_engine, alice.org_id)
    with pytest.raises(AppError):
        _import(app, _principal(admin_engine, org, "alice"), embedder, LINES)
    assert _counts(admin_engine, alice.org_id) == before


def test_a_malformed_asset_line_names_its_line(world):
    from app.episodes import bulk
    from app.kit.errors import AppError

    bad = [json.dumps(LINES[0]), json.dumps({"type": "asset", "kind": "document", "uri": "wiki:x", "chunks": []})]
    with pytest.raises(AppError, match="line 2: chunks"):
        bulk.parse_lines(bad)
    with pytest.raises(AppError, match="line 1: type"):
        bulk.parse_lines([json.dumps({"type": "memory", "kind": "note", "content": "x"})])


def test_erasure_removes_everything_the_import_wrote(app, world, admin_engine, embedder, client):
    org = world.org()
    alice = world.user(org, "alice", groups=("ops",))
    admin = world.user(org, "root", roles=["admin"])
    _import(app, _principal(admin_engine, org, "alice"), embedder, LINES)
    assert _bm25(admin_engine, alice.org_id) != {"episode": 0, "chunk": 0, "df": 0}
    r = client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h)
    assert r.status_code == 202
    job = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=admin.h).json()
    assert job["status"] == "succeeded", job
    assert job["stats"]["episodes_removed"] == 2 and job["stats"]["assets_removed"] == 2
    after = _counts(admin_engine, alice.org_id)
    assert (after["episodes"], after["knowledge_assets"], after["chunks"]) == (0, 0, 0)
    # The vocabulary keeps what the API path's erasure keeps (words no text index holds: stop words).
    other = world.org()
    carol, root = world.user(other, "carol"), world.user(other, "root", roles=["admin"])
    episodes = [{k: v for k, v in x.items() if k != "type"} for x in LINES if x.get("type", "episode") == "episode"]
    assert client.post("/v1/episodes/batch", json={"items": episodes}, headers=carol.h).status_code in (200, 201)
    assert client.delete(f"/v1/users/{carol.user_id}/data", headers=root.h).status_code == 202
    with admin_engine.connect() as c:
        words = [
            sorted(c.execute(text("SELECT word FROM lexicon WHERE org_id = :o"), {"o": o}).scalars())
            for o in (alice.org_id, carol.org_id)
        ]
    assert words[0] == words[1] and len(words[0]) == after["lexicon"]
    assert _bm25(admin_engine, alice.org_id) == {"episode": 0, "chunk": 0, "df": 0}
    with admin_engine.connect() as c:  # nothing of the imported text is left in any table of the org that holds text
        left = c.execute(
            text(
                "SELECT (SELECT count(*) FROM chunks WHERE org_id = :o AND text ILIKE '%lens heater%') + "
                "(SELECT count(*) FROM episodes WHERE org_id = :o AND content ILIKE '%glacier%') + "
                "(SELECT count(*) FROM knowledge_assets WHERE org_id = :o AND source_uri LIKE 'wiki:%')"
            ),
            {"o": alice.org_id},
        ).scalar()
    assert left == 0
