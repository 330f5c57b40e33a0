"""Lineage, retrievals, audit (hash chain, filters, 403), declassify, right to be forgotten."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC

from sqlalchemy import text

from tests.helpers import ep


def _cli(settings, *args):
    env = {**os.environ, "MEMSCALE_DATABASE_URL": settings.database_url}
    return subprocess.run([sys.executable, "-m", "app", *args], env=env, capture_output=True, text=True, timeout=120)


def test_lineage_up_and_down_with_redaction(client, world):
    org = world.org()
    alice = world.user(org)
    bob = world.user(org)
    auditor = world.user(org, roles=["auditor"])
    e = client.post("/v1/episodes", json=ep("I always double-check wire transfers over 10k"), headers=alice.h).json()["id"]
    m = client.post(
        "/v1/memories",
        json={"text": "alice double-checks large wires", "kind": "procedure", "sources": [{"type": "episode", "id": e}]},
        headers=alice.h,
    ).json()["id"]
    up = client.get(f"/v1/lineage/memory/{m}?direction=up", headers=alice.h).json()
    assert {n["id"] for n in up["nodes"]} == {m, e}
    assert up["edges"][0]["relation"] == "distilled_from" and up["edges"][0]["to"]["id"] == e
    down = client.get(f"/v1/lineage/episode/{e}?direction=down", headers=alice.h).json()
    assert {n["id"] for n in down["nodes"]} == {m, e}
    # bob may not see either: 404 (existence is not revealed).
    assert client.get(f"/v1/lineage/memory/{m}", headers=bob.h).status_code == 404
    # The auditor sees the shape with redacted placeholders, never the text.
    aud = client.get(f"/v1/lineage/memory/{m}", headers=auditor.h)
    assert aud.status_code == 200
    nodes = aud.json()["nodes"]
    assert {n["id"] for n in nodes} == {m, e} and all(n.get("redacted") for n in nodes)
    assert "wire" not in aud.text


def test_lineage_omits_hidden_nodes_for_non_auditors(client, world):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    mine = client.post("/v1/episodes", json=ep("deploy notes", visibility="org"), headers=alice.h).json()["id"]
    secret = client.post("/v1/episodes", json=ep("bob's private deploy notes"), headers=bob.h).json()["id"]
    m = client.post(
        "/v1/memories",
        json={
            "text": "deploys need notes",
            "kind": "rule",
            "sources": [{"type": "episode", "id": mine}, {"type": "episode", "id": secret}],
        },
        headers=bob.h,
    ).json()["id"]
    # bob's memory is private to bob (a private source); alice cannot reach it from her episode.
    down = client.get(f"/v1/lineage/episode/{mine}?direction=down", headers=alice.h).json()
    assert {n["id"] for n in down["nodes"]} == {mine} and down["edges"] == []
    assert m and secret


def test_retrieval_record_and_audit_access(client, world):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    auditor = world.user(org, roles=["auditor"])
    client.post("/v1/episodes", json=ep("quarterly close checklist"), headers=alice.h)
    rid = client.post("/v1/search", json={"query": "close checklist"}, headers=alice.h).json()["retrieval_id"]
    r = client.get(f"/v1/retrievals/{rid}", headers=alice.h).json()
    assert r["actor"] == str(alice.user_id) and r["query"] == "close checklist" and r["items"]
    assert client.get(f"/v1/retrievals/{rid}", headers=bob.h).status_code == 404
    assert client.get(f"/v1/retrievals/{rid}", headers=auditor.h).status_code == 200
    assert client.get("/v1/audit", headers=alice.h).status_code == 403
    page = client.get("/v1/audit?limit=2", headers=auditor.h).json()
    assert len(page["events"]) == 2 and page["next_cursor"]
    rest = client.get(f"/v1/audit?cursor={page['next_cursor']}&limit=1000", headers=auditor.h).json()
    assert rest["events"][0]["seq"] == page["events"][-1]["seq"] + 1 and rest["next_cursor"] is None
    creates = client.get(f"/v1/audit?action=episode.create&actor={alice.user_id}", headers=auditor.h).json()["events"]
    assert len(creates) == 1 and "checklist" not in str(creates)


def test_audit_verify_detects_tampering(settings, client, world, admin_engine):
    org = world.org()
    alice = world.user(org)
    for i in range(3):
        client.post("/v1/episodes", json=ep(f"note {i}"), headers=alice.h)
    ok = _cli(settings, "audit", "verify", "--org", org)
    assert ok.returncode == 0 and ok.stdout.startswith("ok ")
    with admin_engine.begin() as c:  # a superuser bypasses the append-only trigger on purpose
        c.execute(text("SET LOCAL session_replication_role = replica"))
        c.execute(text("UPDATE audit_log SET details = '{\"count\": 99}' WHERE org_id = :o AND seq = 3"), {"o": alice.org_id})
    bad = _cli(settings, "audit", "verify", "--org", org)
    assert bad.returncode == 1 and bad.stdout.startswith("broken at seq 3")


def test_declassify_is_stewards_only_and_recorded(client, world, admin_engine):
    org = world.org()
    alice = world.user(org)
    steward = world.user(org, roles=["steward"])
    bob = world.user(org)
    m = client.post(
        "/v1/memories",
        json={"text": "use the blue deploy pipeline", "kind": "rule", "visibility": "org", "labels": ["internal"]},
        headers=alice.h,
    ).json()["id"]
    body = {"visibility": "org", "labels": [], "reason": "not sensitive after launch"}
    assert client.post(f"/v1/memories/{m}/declassify", json=body, headers=alice.h).status_code == 403
    assert client.get(f"/v1/memories/{m}", headers=bob.h).status_code == 404
    steward2 = world.user(org, roles=["steward"], clearances=["internal"])
    r = client.post(f"/v1/memories/{m}/declassify", json=body, headers=steward2.h)
    assert r.status_code == 200, r.text
    new = r.json()
    assert new["labels"] == [] and client.get(f"/v1/memories/{new['id']}", headers=bob.h).status_code == 200
    up = client.get(f"/v1/lineage/memory/{new['id']}?direction=up", headers=steward2.h).json()
    assert [e["relation"] for e in up["edges"]] == ["declassified_from"]
    with admin_engine.connect() as c:
        d = c.execute(
            text("SELECT details FROM audit_log WHERE action = 'memory.declassify' AND target_id = :i"), {"i": new["id"]}
        ).scalar()
    assert d["reason"] == "not sensitive after launch" and d["from"]["labels"] == ["internal"]
    assert steward  # a steward without the label's clearance cannot even see it: 404
    assert client.post(f"/v1/memories/{new['id']}/declassify", json=body, headers=bob.h).status_code == 403


def test_right_to_be_forgotten(client, world, admin_engine):
    org = world.org()
    alice = world.user(org)
    admin = world.user(org, roles=["admin"])
    bob = world.user(org)
    e = client.post("/v1/episodes", json=ep("alice's home address is 12 Elm Street", visibility="org"), headers=alice.h).json()[
        "id"
    ]
    client.post(
        "/v1/memories",
        json={
            "text": "alice lives on Elm Street",
            "kind": "fact",
            "visibility": "org",
            "sources": [{"type": "episode", "id": e}],
        },
        headers=alice.h,
    )
    client.post("/v1/search", json={"query": "Elm Street"}, headers=alice.h)
    client.post("/v1/sessions", json={}, headers=alice.h)
    assert client.delete(f"/v1/users/{alice.user_id}/data", headers=bob.h).status_code == 404
    r = client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h)
    assert r.status_code == 202
    job = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=admin.h).json()
    assert job["status"] == "succeeded" and job["stats"]["episodes_removed"] == 1 and job["stats"]["keys_revoked"] == 1
    with admin_engine.connect() as c:
        for table, col in (("episodes", "content"), ("memories", "text"), ("retrieval_events", "query")):
            n = c.execute(
                text(f"SELECT count(*) FROM {table} WHERE org_id = :o AND {col} ILIKE '%elm%'"), {"o": alice.org_id}
            ).scalar()
            assert n == 0, table
        assert (
            c.execute(
                text("SELECT count(*) FROM audit_log WHERE org_id = :o AND action = 'user.forget'"), {"o": alice.org_id}
            ).scalar()
            == 1
        )
        assert (
            "elm"
            not in str(c.execute(text("SELECT details FROM audit_log WHERE org_id = :o"), {"o": alice.org_id}).all()).lower()
        )
    assert client.post("/v1/search", json={"query": "Elm Street home address"}, headers=bob.h).json()["results"] == []
    assert client.get("/healthz").status_code == 200
    assert client.post("/v1/episodes", json=ep("x"), headers=alice.h).status_code == 401


def test_retention_job(client, world, run_job, settings):
    org = world.org()
    alice = world.user(org)
    old = client.post("/v1/episodes", json=ep("old note", occurred_at="2020-01-01T00:00:00Z"), headers=alice.h).json()["id"]
    new = client.post("/v1/episodes", json=ep("new note"), headers=alice.h).json()["id"]
    assert _cli(settings, "admin", "set-retention", "--org", org, "--days", "365").returncode == 0
    job = run_job(alice.org_id, "retention")
    assert job.status == "succeeded" and job.stats["episodes_removed"] == 1
    assert client.get(f"/v1/episodes/{old}", headers=alice.h).status_code == 404
    assert client.get(f"/v1/episodes/{new}", headers=alice.h).status_code == 200
    # Retention reaches every branch: an old episode written in a branch goes too.
    steward = world.user(org, roles=("steward",))
    assert client.post("/v1/branches", json={"name": "keep-old"}, headers=steward.h).status_code == 201
    in_branch = {**alice.h, "Memscale-Branch": "keep-old"}
    old_b = client.post("/v1/episodes", json=ep("old branch note", occurred_at="2020-01-01T00:00:00Z"), headers=in_branch).json()[
        "id"
    ]
    assert client.get(f"/v1/episodes/{old_b}", headers=in_branch).status_code == 200
    job = run_job(alice.org_id, "retention")
    assert job.status == "succeeded" and job.stats["episodes_removed"] == 1
    assert client.get(f"/v1/episodes/{old_b}", headers=in_branch).status_code == 404


def test_a_forged_well_formed_event_fails_the_seal(settings, client, world, admin_engine, tmp_path):
    """An attacker with only database credentials (here: the owner connection) appends an event
    whose chain hash is right: `audit verify` names it, because its seal needs the service's key."""
    from datetime import datetime

    from app.audit.service import _digest

    org = world.org()
    alice = world.user(org)
    client.post("/v1/episodes", json=ep("note"), headers=alice.h)
    cp = _cli(settings, "audit", "checkpoint", "--org", org)
    assert cp.returncode == 0
    (tmp_path / "cp.json").write_text(cp.stdout)
    assert _cli(settings, "audit", "verify", "--org", org, "--checkpoint", str(tmp_path / "cp.json")).returncode == 0
    with admin_engine.begin() as c:
        seq, prev = c.execute(
            text("SELECT seq, hash FROM audit_log WHERE org_id = :o ORDER BY seq DESC LIMIT 1"), {"o": alice.org_id}
        ).one()
        at = datetime.now(UTC)
        details = {"count": 1}
        h = _digest(
            prev,
            alice.org_id,
            seq + 1,
            at,
            alice.user_id,
            "episode.delete",
            target_type="episode",
            target_id="x",
            details=details,
        )
        c.execute(
            text(
                "INSERT INTO audit_log (org_id, seq, at, actor_id, action, target_type, target_id, details, "
                "prev_hash, hash, mac) VALUES (:o, :s, :at, :a, 'episode.delete', 'episode', 'x', "
                "'{\"count\": 1}', :p, :h, :m)"
            ),
            {"o": alice.org_id, "s": seq + 1, "at": at, "a": alice.user_id, "p": prev, "h": h, "m": "0" * 64},
        )
    bad = _cli(settings, "audit", "verify", "--org", org)
    assert bad.returncode == 1 and bad.stdout.startswith(f"broken at seq {seq + 1}")


def test_forgetting_calls_the_inference_tier_only_after_the_commit(client, world, run_job, admin_engine, tmp_path, monkeypatch):
    """The tier's chunk-KV drop is a network call: it happens once the deletion is committed (a
    separate connection already sees the assets gone), never inside the request's transaction."""
    from app.erasure import endpoints as erasure_endpoints

    org = world.org()
    alice = world.user(org, roles=["steward"])
    d = tmp_path / "docs"
    d.mkdir()
    (d / "plan.md").write_text("Alice's launch plan for project Falcon ships in May.")
    # An operator run: the org's only steward (alice) owns the asset, private to her.
    assert run_job(alice.org_id, "bootstrap", {"path": str(d), "visibility": "private"}).status == "succeeded"
    admin = world.user(org, roles=["admin"])

    def assets_of_alice() -> int:
        with admin_engine.connect() as c:  # the owner role, outside the request's transaction
            return c.execute(text("SELECT count(*) FROM knowledge_assets WHERE owner_id = :u"), {"u": alice.user_id}).scalar()

    seen: dict = {}

    class Tier:
        def drop_chunks(self, hashes: list[str]) -> int:
            seen["assets_left"], seen["hashes"] = assets_of_alice(), len(hashes)
            return len(hashes)

        def close(self) -> None:
            seen["closed"] = True

    assert assets_of_alice() == 1
    monkeypatch.setattr(erasure_endpoints, "tier_client", lambda settings: Tier())
    r = client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h)
    assert r.status_code == 202
    job = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=admin.h).json()
    assert job["status"] == "succeeded" and job["stats"]["chunk_kv_deleted"] == seen["hashes"] >= 1
    assert seen == {"assets_left": 0, "hashes": job["stats"]["chunk_kv_deleted"], "closed": True}
