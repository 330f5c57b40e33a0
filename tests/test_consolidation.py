from __future__ import annotations

import sqlite3

from sqlalchemy import text

from pipelines.consolidation.rules import contradicts


def test_contradiction_rules():
    assert contradicts("Deploys happen on Tuesday", "Deploys happen on Thursday")
    assert contradicts("The retention window is 30 days", "The retention window is 90 days")
    assert contradicts("Use the VPN for the admin panel", "Do not use the VPN for the admin panel")
    assert not contradicts("Deploys happen on Tuesday", "Deploys happen every Tuesday")


def _mem(client, actor, text_, **kw):
    r = client.post("/v1/memories", json={"text": text_, "kind": "rule", **kw}, headers=actor.h)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_merge_duplicates_and_resolve_conflicts(client, world, run_job, admin_engine):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    d1 = _mem(client, alice, "Production deploys require two approvals.", visibility="org")
    d2 = _mem(client, alice, "Production deploys require two approvals!", visibility="org")
    old = _mem(client, alice, "The on-call rotation changes on Monday.", visibility="org")
    new = _mem(client, alice, "The on-call rotation changes on Wednesday.", visibility="org")
    # Same text but another owner: never merged with alice's.
    other = _mem(client, bob, "Production deploys require two approvals.", visibility="org")
    job = run_job(alice.org_id, "consolidate", {})
    assert job.status == "succeeded", job.error
    assert job.stats["merged"] == 1 and job.stats["superseded"] == 1, job.stats
    status = lambda i: client.get(f"/v1/memories/{i}", headers=alice.h).json()  # noqa: E731
    assert sorted([status(d1)["status"], status(d2)["status"]]) == ["active", "superseded"]
    assert status(old)["status"] == "superseded" and status(old)["valid_to"]
    assert status(new)["status"] == "active" and status(other)["status"] == "active"
    with admin_engine.connect() as c:
        rels = (
            c.execute(
                text("SELECT relation FROM lineage_edges WHERE org_id = :o AND job_id = :j"), {"o": alice.org_id, "j": job.id}
            )
            .scalars()
            .all()
        )
    assert sorted(rels) == ["merged_from", "supersedes"]
    again = run_job(alice.org_id, "consolidate", {})
    assert again.stats["merged"] == again.stats["superseded"] == 0


def test_schema_hints_revalidated_after_a_table_drop(client, world, run_job, tmp_path):
    org = world.org()
    steward = world.user(org, roles=["steward"])
    db = tmp_path / "s.db"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE a (x INTEGER); CREATE TABLE b (y INTEGER);")
    con.close()
    params = {"schema_url": f"sqlite:///{db}", "visibility": "org"}
    assert run_job(steward.org_id, "bootstrap", params).status == "succeeded"
    con = sqlite3.connect(db)
    con.executescript("DROP TABLE b;")
    con.close()
    boot = run_job(steward.org_id, "bootstrap", params)
    assert boot.stats["tables_dropped"] == 1
    job = run_job(steward.org_id, "consolidate", {})
    assert job.stats["quarantined"] == 1
    hints = client.post(
        "/v1/search",
        json={"query": "table columns", "types": ["memory"], "filters": {"kinds": ["schema_hint"]}},
        headers=steward.h,
    ).json()["results"]
    assert [h["text"].split()[1] for h in hints] == ["a"]
