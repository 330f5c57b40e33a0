from tests.conftest import episode


def test_health(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200


def test_create_get_episode(client, world):
    org = world.org()
    alice = world.user(org, "alice")
    r = client.post("/v1/episodes", json=episode(), headers=alice.h)
    assert r.status_code == 201, r.text
    eid = r.json()["id"]
    g = client.get(f"/v1/episodes/{eid}", headers=alice.h)
    assert g.status_code == 200 and g.json()["content"] == episode()["content"]
