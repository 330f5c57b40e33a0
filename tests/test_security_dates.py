"""Issue 41 M1 and the naive-date 500: every date-time a client sends is an instant with its offset
inside 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999Z (422 otherwise, nothing changed), and a
row already holding an instant Python cannot read (written with SQL) does not break its org's reads,
deletes or the branch CLI. M2: the time expressions of one query or instruction cost a bounded
number of dateparser calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from tests.helpers import count, ep

TOKEN = "quokkalantern"  # every item of these tests holds it, so a text search finds them

LOW = "0001-01-01T00:00:00+14:00"  # 31 December 1 BC, 10:00 UTC
HIGH = "9999-12-31T23:59:59-14:00"  # 1 January 10000, 13:59 UTC
NAIVE = "2026-01-31T12:00:00"
BAD = [LOW, HIGH, NAIVE]


def _counts(admin_engine, org_id) -> tuple:
    return tuple(count(admin_engine, t, org_id) for t in ("episodes", "memories", "branches"))


@pytest.mark.parametrize("value", BAD)
def test_every_client_instant_is_bounded_and_has_its_offset(client, world, admin_engine, value):
    org = world.org()
    admin = world.user(org, roles=("admin",))
    m = client.post("/v1/memories", json={"text": f"{TOKEN} fact", "kind": "fact"}, headers=admin.h).json()
    before = _counts(admin_engine, admin.org_id)
    bodies = [
        ("post", "/v1/episodes", {"json": ep(TOKEN, occurred_at=value)}),
        ("post", "/v1/episodes", {"json": ep(TOKEN, messages=[{"role": "user", "content": "hi", "at": value}])}),
        ("post", "/v1/episodes/batch", {"json": {"items": [ep(TOKEN), ep(TOKEN, occurred_at=value)]}}),
        ("post", "/v1/memories", {"json": {"text": f"{TOKEN} x", "kind": "fact", "valid_from": value}}),
        ("post", "/v1/branches", {"json": {"name": "trial", "at": value}}),
        ("post", "/v1/search", {"json": {"query": TOKEN, "as_of": value}}),
        ("post", "/v1/search", {"json": {"query": TOKEN, "filters": {"since": value}}}),
        ("post", "/v1/search", {"json": {"query": TOKEN, "filters": {"until": value}}}),
        ("post", "/v1/context", {"json": {"query": TOKEN, "as_of": value}}),
        ("get", f"/v1/memories/{m['id']}", {"params": {"as_of": value}}),
        ("get", f"/v1/lineage/memory/{m['id']}", {"params": {"as_of": value}}),
        ("get", "/v1/audit", {"params": {"since": value}}),
        ("get", "/v1/audit", {"params": {"until": value}}),
    ]
    for method, path, kw in bodies:
        r = getattr(client, method)(path, headers=admin.h, **kw)
        assert r.status_code == 422, (path, kw, r.status_code, r.text)
        assert r.json()["error"]["code"] == "validation_error"
    assert _counts(admin_engine, admin.org_id) == before


def test_the_bounds_themselves_are_accepted_and_read_back(client, world):
    org = world.org()
    alice = world.user(org)
    for at in ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999+00:00", "0001-01-01T13:00:00+13:00"):
        r = client.post("/v1/episodes", json=ep(f"{TOKEN} {at}", occurred_at=at), headers=alice.h)
        assert r.status_code == 201, r.text
        got = client.get(f"/v1/episodes/{r.json()['id']}", headers=alice.h)
        assert got.status_code == 200
        assert datetime.fromisoformat(got.json()["occurred_at"]) == datetime.fromisoformat(at)

    def found(**window) -> int:
        r = client.post(
            "/v1/search", json={"query": TOKEN, "types": ["episode"], "mode": "text", "k": 10, "filters": window}, headers=alice.h
        )
        assert r.status_code == 200, r.text
        return len(r.json()["results"])

    assert found(since="0001-01-01T00:00:00Z") == 3
    assert found(until="0001-01-01T00:00:00.000001Z") == 2  # the first and the third are the same instant
    assert found(since="9999-12-31T23:59:59.999999Z") == 1


def test_a_naive_since_beside_an_instruction_date_is_a_422_not_a_500(client, world):
    """The instruction's window (aware) and the caller's naive `since` used to be compared: TypeError, 500."""
    alice = world.user(world.org())
    for path in ("/v1/search", "/v1/context"):
        r = client.post(
            path,
            json={"query": TOKEN, "instruction": "notes since March 3, 2024", "filters": {"since": "2024-01-01T00:00:00"}}
            if path == "/v1/search"
            else {"query": TOKEN, "instruction": "notes since March 3, 2024", "as_of": NAIVE},
            headers=alice.h,
        )
        assert r.status_code == 422, r.text
    r = client.post(
        "/v1/search",
        json={"query": TOKEN, "instruction": "notes since March 3, 2024", "filters": {"since": "2024-01-01T00:00:00+00:00"}},
        headers=alice.h,
    )
    assert r.status_code == 200
    assert r.json()["interpreted"]["filters"]["since"].startswith("2024-03-03")


# ---- rows written before the rule (or with SQL) -----------------------------------------------------
def _poison(admin_engine, sql: str, **params) -> None:
    with admin_engine.begin() as c:
        c.execute(text(sql), params)


def _cli(settings, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEMSCALE_DATABASE_URL": settings.database_url}
    return subprocess.run([sys.executable, "-m", "app", *args], env=env, capture_output=True, text=True, timeout=180)


def test_reads_and_deletes_survive_rows_at_year_0_and_10000(client, world, admin_engine):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    admin = world.user(org, roles=("admin",))
    old = client.post(
        "/v1/memories", json={"text": f"{TOKEN} deploys on friday", "kind": "fact", "visibility": "org"}, headers=alice.h
    ).json()
    late = client.post(
        "/v1/memories", json={"text": f"{TOKEN} rollback on monday", "kind": "fact", "visibility": "org"}, headers=alice.h
    ).json()
    e_old = client.post("/v1/episodes", json=ep(f"{TOKEN} the cache was cold", visibility="org"), headers=alice.h).json()
    e_late = client.post("/v1/episodes", json=ep(f"{TOKEN} the cache was warm", visibility="org"), headers=alice.h).json()
    # What the requests stored, written the way the old code let them through.
    _poison(admin_engine, "UPDATE memories SET valid_from = CAST(:v AS timestamptz) WHERE id = :i", v=LOW, i=old["id"])
    _poison(admin_engine, "UPDATE memories SET valid_from = CAST(:v AS timestamptz) WHERE id = :i", v=HIGH, i=late["id"])
    _poison(admin_engine, "UPDATE episodes SET occurred_at = CAST(:v AS timestamptz) WHERE id = :i", v=LOW, i=e_old["id"])
    _poison(admin_engine, "UPDATE episodes SET occurred_at = 'infinity' WHERE id = :i", i=e_late["id"])

    for who in (alice, bob, admin):
        r = client.post("/v1/search", json={"query": TOKEN, "k": 20}, headers=who.h)
        assert r.status_code == 200, r.text
        assert {x["id"] for x in r.json()["results"]} == {old["id"], late["id"], e_old["id"], e_late["id"]}
        r = client.post("/v1/context", json={"query": f"{TOKEN} deploys cache"}, headers=who.h)
        assert r.status_code == 200, r.text
        assert "deploys on friday" in r.json()["text"] and "the cache was warm" in r.json()["text"]
    got = client.get(f"/v1/memories/{old['id']}", headers=bob.h)
    assert got.status_code == 200
    assert got.json()["valid_from"] == "0001-01-01T00:00:00Z" or datetime.fromisoformat(
        got.json()["valid_from"]
    ) == datetime.min.replace(tzinfo=UTC)
    got = client.get(f"/v1/memories/{late['id']}", headers=bob.h)
    assert got.status_code == 200
    assert datetime.fromisoformat(got.json()["valid_from"]) == datetime.max.replace(tzinfo=UTC)
    got = client.get(f"/v1/episodes/{e_late['id']}", headers=alice.h)
    assert got.status_code == 200
    assert datetime.fromisoformat(got.json()["occurred_at"]) == datetime.max.replace(tzinfo=UTC)
    # The owner deletes one, an admin the other (both were 422 before).
    assert client.delete(f"/v1/memories/{old['id']}", headers=alice.h).status_code == 204
    assert client.delete(f"/v1/memories/{late['id']}", headers=admin.h).status_code == 204
    for e in (e_old, e_late):
        r = client.delete(f"/v1/episodes/{e['id']}", headers=admin.h)
        assert r.status_code == 202, r.text
        assert client.get(f"/v1/jobs/{r.json()['job_id']}", headers=admin.h).json()["status"] == "succeeded"
        assert client.get(f"/v1/episodes/{e['id']}", headers=alice.h).status_code == 404
    with admin_engine.connect() as c:
        left = c.execute(
            text("SELECT count(*) FROM memories WHERE root_id IN (:a, :b)"), {"a": old["root_id"], "b": late["root_id"]}
        ).scalar()
    assert left == 0
    assert client.get(f"/v1/memories/{old['id']}", headers=alice.h).status_code == 404
    r = client.post("/v1/search", json={"query": TOKEN, "k": 20}, headers=bob.h)
    assert r.status_code == 200 and r.json()["results"] == []


def test_branches_survive_a_fork_instant_out_of_range(client, world, admin_engine, settings):
    org = world.org()
    steward = world.user(org, "stew", roles=("steward",))
    for name in ("past", "future"):
        assert client.post("/v1/branches", json={"name": name}, headers=steward.h).status_code == 201
    _poison(
        admin_engine,
        "UPDATE branches SET fork_at = CAST(:v AS timestamptz) WHERE org_id = :o AND name = 'past'",
        v=LOW,
        o=steward.org_id,
    )
    _poison(
        admin_engine,
        "UPDATE branches SET fork_at = CAST(:v AS timestamptz) WHERE org_id = :o AND name = 'future'",
        v=HIGH,
        o=steward.org_id,
    )
    r = client.get("/v1/branches", headers=steward.h)
    assert r.status_code == 200, r.text
    assert {b["name"] for b in r.json()["branches"]} == {"past", "future"}
    r = client.post("/v1/search", json={"query": TOKEN}, headers={**steward.h, "Memscale-Branch": "future"})
    assert r.status_code == 200, r.text
    listed = _cli(settings, "branch", "list", "--org", org)
    assert listed.returncode == 0, listed.stderr
    assert {b["name"] for b in json.loads(listed.stdout)} == {"past", "future"}
    dropped = _cli(settings, "branch", "drop", "past", "--org", org)
    assert dropped.returncode == 0, dropped.stderr
    assert client.delete("/v1/branches/future", headers=steward.h).status_code == 204
    assert count(admin_engine, "branches", steward.org_id) == 0


def test_the_tolerant_loader_clamps_only_what_python_cannot_hold(app):
    """The service's own connections: in-range instants unchanged, the rest clamped to min/max UTC."""
    lo, hi = datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)
    with app.state.sessions() as db:
        row = db.execute(
            text(
                "SELECT CAST('2026-03-01 10:00:00+02' AS timestamptz), CAST('0001-01-01 00:00:00+14' AS timestamptz),"
                " CAST('10000-01-01 00:00:00+00' AS timestamptz), CAST('infinity' AS timestamptz),"
                " CAST('-infinity' AS timestamptz), CAST('0005-06-01 00:00:00 BC' AS timestamp),"
                " CAST('12000-01-01 00:00:00' AS timestamp)"
            )
        ).one()
    assert row[0] == datetime(2026, 3, 1, 8, tzinfo=UTC)
    assert list(row[1:5]) == [lo, hi, hi, lo]
    assert list(row[5:]) == [datetime.min, datetime.max]


# ---- M2: parsing cost ---------------------------------------------------------------------------
PATHOLOGICAL = ("in 2023-02-30 " * 200)[:2000]
DISTINCT = (
    " ".join(f"on {d} march 2023" for d in range(1, 29))
    + " "
    + " ".join(f"in {m} {y}" for y in range(1990, 2030) for m in ("may", "june", "july"))
)


def test_one_reading_calls_dateparser_a_bounded_number_of_times(monkeypatch):
    from app.search import dates, instruction, time_window

    calls = []
    parser = dates._date_parser()
    real = parser.get_date_data
    monkeypatch.setattr(parser, "get_date_data", lambda expr: calls.append(expr) or real(expr))
    now = datetime(2026, 6, 1, tzinfo=UTC)
    for text_ in (PATHOLOGICAL, DISTINCT[:2000]):
        calls.clear()
        time_window.query_window(text_, now=now)
        assert len(calls) <= dates.MAX_PARSED, len(calls)
        calls.clear()
        _, _, ignored = instruction.interpret(text_[:1000], now=now)
        assert len(calls) <= dates.MAX_PARSED, len(calls)
    assert any("dates" in i for i in ignored)  # the rest is named, not silently dropped
    # What a normal instruction names is still read, ISO dates without dateparser.
    calls.clear()
    f, _, _ = instruction.interpret("rules from 2026-03-02 until 15 April", now=now)
    assert (f.since, f.until) == (datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 4, 16, tzinfo=UTC))
    assert calls == ["15 april"]
    assert time_window.query_window("what happened in 2023-02-30", now=now) is None


def test_pathological_dates_cost_little_per_request(client, world):
    alice = world.user(world.org())
    body = {"query": PATHOLOGICAL, "instruction": PATHOLOGICAL[:1000]}
    for path in ("/v1/search", "/v1/context"):
        assert client.post(path, json=body, headers=alice.h).status_code == 200
    from app.search import instruction, time_window

    t0 = time.perf_counter()
    for _ in range(5):
        time_window.query_window(PATHOLOGICAL)
        instruction.interpret(PATHOLOGICAL[:1000])
        time_window.query_window(DISTINCT[:2000])
        instruction.interpret(DISTINCT[:1000])
    per_request = (time.perf_counter() - t0) / 5
    assert per_request < 0.15, per_request  # was ~0.3 s for the first pair alone, ~0.5 s with the second


class _SlowByLength:
    """An embedder that takes 0.2 ms a character (a 2,000-character query ~0.4 s) and records
    the first five characters of each call's first text."""

    dim = 4

    def __init__(self) -> None:
        self.calls: list[str] = []

    def embed(self, texts):
        import numpy as np

        self.calls.append(texts[0][:5])
        time.sleep(0.0002 * sum(len(t) for t in texts))
        return np.ones((len(texts), self.dim), dtype=np.float32)


def test_a_short_query_is_embedded_before_queued_long_ones():
    """Four loops of 2,000-character queries kept the embedder's read line full: another tenant's
    short query waited behind all of them (app/kit/runtime/fairness.py orders waiting reads by cost)."""
    import threading

    from app.kit.runtime.fairness import FairEmbedder

    inner = _SlowByLength()
    fair = FairEmbedder(inner)
    longs = [threading.Thread(target=fair.embed, args=([f"long{i}" + "x" * 1995],)) for i in range(6)]
    for t in longs:
        t.start()
        time.sleep(0.02)
    t0 = time.perf_counter()
    fair.embed(["short query"])
    waited = time.perf_counter() - t0
    for t in longs:
        t.join()
    # right after the ones already running (fair.max_reads of them run side by side)
    assert inner.calls.index("short") == fair.max_reads, inner.calls
    assert waited < 0.8, waited


def test_a_short_query_does_not_wait_for_another_tenants_long_one():
    """With the per-key read gate, a flooding key holder has one query in the embedder at a time;
    another tenant's short query is embedded beside it, not after it (app/kit/runtime/fairness.py
    `max_reads`; the local model runs a query on one thread)."""
    import threading

    from app.kit.runtime.fairness import FairEmbedder

    fair = FairEmbedder(_SlowByLength())
    long = threading.Thread(target=fair.embed, args=(["x" * 2000],))
    long.start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    fair.embed(["short query"])
    waited = time.perf_counter() - t0
    long.join()
    assert waited < 0.2, waited  # it did not wait out the long one's 0.4 s


def test_a_short_query_does_not_wait_for_a_slice_of_another_tenants_batch():
    """A write slice and a query run side by side (the local model runs a query on one thread,
    outside its batch lock): another tenant's 1 MB batches cost the victim's search CPU, not a
    place in line behind each slice."""
    import threading

    from app.kit.runtime.fairness import FairEmbedder

    fair = FairEmbedder(_SlowByLength(), slice_tokens=4000)  # one slice of ~0.8 s
    batch = threading.Thread(target=fair.embed_write, args=("flooder", ["y" * 400] * 10))
    batch.start()
    time.sleep(0.1)
    t0 = time.perf_counter()
    fair.embed(["short query"])
    waited = time.perf_counter() - t0
    batch.join()
    assert waited < 0.3, waited  # not the slice's 0.8 s
