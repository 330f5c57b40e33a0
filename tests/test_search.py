from __future__ import annotations

from sqlalchemy import text

from tests.helpers import ep


def test_hybrid_vector_and_text_modes(client, world):
    org = world.org()
    alice = world.user(org)
    items = [ep("The staging database password rotates every 30 days"),
             ep("Lunch options near the office include tacos and ramen"),
             ep("To restart the ingestion worker run systemctl restart ingest", kind="trajectory", outcome="success")]
    ids = client.post("/v1/episodes/batch", json={"items": items}, headers=alice.h).json()["ids"]
    for mode in ("hybrid", "vector", "text"):
        r = client.post("/v1/search", json={"query": "restart ingestion worker", "mode": mode}, headers=alice.h)
        assert r.status_code == 200
        res = r.json()["results"]
        assert res and res[0]["id"] == ids[2], (mode, res)
        assert {"type", "id", "text", "score", "visibility", "labels", "created_at"} <= set(res[0])


def test_filters(client, world):
    org = world.org()
    alice = world.user(org)
    a = client.post("/v1/episodes", json=ep("rotate the api keys quarterly", session_id="s1"), headers=alice.h).json()["id"]
    b = client.post("/v1/episodes", json=ep("rotate the api keys monthly", kind="feedback"), headers=alice.h).json()["id"]
    got = lambda f: {x["id"] for x in client.post("/v1/search", json={"query": "rotate api keys", "filters": f},  # noqa: E731
                                                 headers=alice.h).json()["results"]}
    assert got({"session_id": "s1"}) == {a}
    assert got({"kinds": ["feedback"]}) == {b}
    assert got({"since": "2999-01-01T00:00:00Z"}) == set()


def test_retrieval_event_records_what_was_handed_out(client, world, admin_engine):
    org = world.org()
    alice = world.user(org)
    client.post("/v1/episodes", json=ep("kafka consumer lag alert fires at 10k"), headers=alice.h)
    r = client.post("/v1/search", json={"query": "kafka lag"}, headers=alice.h).json()
    with admin_engine.connect() as c:
        row = c.execute(text("SELECT actor_id, query, items FROM retrieval_events WHERE id = :i"),
                        {"i": r["retrieval_id"]}).one()
    assert row.actor_id == alice.user_id and row.query == "kafka lag"
    assert [i["id"] for i in row.items] == [x["id"] for x in r["results"]]


def test_restrictive_acl_does_not_return_short_results(client, world, app):
    """Many org-visible rows of others nearer the query than alice's few private rows: HNSW's
    post-filter would come back short; the exact fallback must return all k visible rows."""
    org = world.org()
    alice, other = world.user(org), world.user(org)
    noise = [ep(f"postgres vacuum tuning note number {i}", visibility="private") for i in range(300)]
    client.post("/v1/episodes/batch", json={"items": noise}, headers=other.h)
    mine = [ep(f"my own note {i} about gardening and tomatoes") for i in range(12)]
    mine_ids = set(client.post("/v1/episodes/batch", json={"items": mine}, headers=alice.h).json()["ids"])
    r = client.post("/v1/search", json={"query": "postgres vacuum tuning", "mode": "vector", "k": 10,
                                        "types": ["episode"]}, headers=alice.h).json()
    assert len(r["results"]) == 10 and {x["id"] for x in r["results"]} <= mine_ids
