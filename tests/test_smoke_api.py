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


def test_request_id_and_one_access_line_per_request(client, world):
    """Every response carries x-request-id (the caller's, else a new one) and the access log gets
    one line with method, path, status, timing and the caller's user id: never the key or a body."""
    import logging

    org = world.org()
    alice = world.user(org, "alice")
    lines: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record)

    # The level is the process's (setup_logging sets the `memscale` logger from the settings of the
    # last app built): a bench run earlier in the same process at WARNING would hide the lines.
    log = logging.getLogger("memscale.access")
    h, level = Keep(), log.level
    log.addHandler(h)
    log.setLevel(logging.INFO)
    try:
        mine = client.get("/healthz", headers={"x-request-id": "trace-me-42"})
        new = client.post("/v1/episodes", json=episode("request id canary"), headers=alice.h)
        denied = client.get(f"/v1/episodes/{new.json()['id']}", headers={"Authorization": "Bearer nope"})
    finally:
        log.removeHandler(h)
        log.setLevel(level)
    assert mine.headers["x-request-id"] == "trace-me-42"
    assert len(new.headers["x-request-id"]) == 32 and new.headers["x-request-id"] != denied.headers["x-request-id"]
    got = [(r.method, r.path, r.status, r.user_id, r.request_id) for r in lines]
    assert got == [
        ("GET", "/healthz", 200, None, "trace-me-42"),
        ("POST", "/v1/episodes", 201, str(alice.user_id), new.headers["x-request-id"]),
        ("GET", f"/v1/episodes/{new.json()['id']}", 401, None, denied.headers["x-request-id"]),
    ]
    assert all(isinstance(r.ms, float) and r.ms >= 0 for r in lines)
    assert not any("canary" in r.getMessage() or "nope" in str(r.__dict__) for r in lines)
