"""Bootstrap in a branch (issue 18): knowledge assets, chunks and tree nodes are copy-on-write like
memories; main's rows never change, other users and orgs see nothing of it, dropping the branch
and erasure reach what it wrote."""

from __future__ import annotations

import sqlite3

from sqlalchemy import text

from bench.common import main_dump
from tests.test_knowledge_nav import _source


def _h(who, branch: str | None = None) -> dict:
    return {**who.h, **({"Memscale-Branch": branch} if branch else {})}


def _chunks(client, who, query: str, branch: str | None = None) -> str:
    r = client.post("/v1/search", json={"query": query, "types": ["chunk"], "mode": "text", "k": 20}, headers=_h(who, branch))
    assert r.status_code == 200, r.text
    return " ".join(x["text"] for x in r.json()["results"])


def _tables(client, who, branch: str | None = None) -> list[str]:
    r = client.get("/v1/knowledge/tree", params={"path": "shop/main"}, headers=_h(who, branch))
    assert r.status_code == 200, r.text
    return [c["name"] for c in r.json()["children"]]


def _branch_rows(engine, org_id) -> dict:
    with engine.connect() as c:
        return {
            t: c.execute(text(f"SELECT count(*) FROM {t} WHERE org_id = :o AND branch_id IS NOT NULL"), {"o": org_id}).scalar()
            for t in ("knowledge_assets", "chunks", "knowledge_nodes")
        }


def test_bootstrap_in_a_branch_is_copy_on_write(run_job, world, client, tmp_path, admin_engine):
    org, other_org = world.org(), world.org()
    steward = world.user(org, roles=["steward"])
    member = world.user(org)
    outsider = world.user(other_org, roles=["steward"])
    params, db = _source(tmp_path)
    params = {**params, "visibility": "org"}
    assert run_job(steward.org_id, "bootstrap", params).status == "succeeded"
    dump = main_dump(admin_engine, steward.org_id)
    assert dump["chunks"]["rows"] > 0 and dump["knowledge_nodes"]["rows"] > 0
    assert client.post("/v1/branches", json={"name": "kb-trial"}, headers=steward.h).status_code == 201

    # The sources change: a runbook edit, a new document, a table dropped, a new glossary term.
    docs = tmp_path / "shop_docs"
    (docs / "runbook.md").write_text("# Runbook\n\n## Refunds\n\nRefunds above 900 EUR need a second approver.")
    (docs / "oncall.md").write_text("# On-call\n\nPage the data team for kafka lag above 50k.")
    con = sqlite3.connect(db)
    con.executescript("DROP TABLE orders; CREATE TABLE invoices (invoice_id INTEGER PRIMARY KEY, amt REAL);")
    con.close()
    job = run_job(steward.org_id, "bootstrap", params, branch="kb-trial")
    assert job.status == "succeeded", job.error
    assert job.branch_id is not None
    assert job.stats["tables_dropped"] == 1 and job.stats["created"] == 2  # oncall.md, invoices
    assert job.stats["updated"] >= 2  # runbook.md, customers (its join to orders is gone)

    # The branch reads its own knowledge; main reads its own, unchanged byte for byte.
    assert "900 EUR" in _chunks(client, member, "refunds approver", "kb-trial")
    assert "500 EUR" not in _chunks(client, member, "refunds approver", "kb-trial")
    assert "500 EUR" in _chunks(client, member, "refunds approver")
    assert "900 EUR" not in _chunks(client, member, "refunds approver")
    assert "kafka" in _chunks(client, member, "kafka lag", "kb-trial") and not _chunks(client, member, "kafka lag")
    assert _tables(client, member, "kb-trial") == ["customers", "invoices"]
    assert _tables(client, member) == ["customers", "orders"]
    assert main_dump(admin_engine, steward.org_id) == dump
    hints = client.post(
        "/v1/search",
        json={"query": "orders invoices table", "types": ["memory"], "k": 20, "filters": {"kinds": ["schema_hint"]}},
        headers=member.h,
    ).json()["results"]
    assert not any("invoices" in h["text"] for h in hints)  # the branch's schema hints stay in it

    # The diff lists the knowledge changes; they are not promotable (knowledge comes from sources).
    changes = client.get("/v1/branches/kb-trial/diff", headers=steward.h).json()["changes"]
    assets = [c for c in changes if c["type"] == "asset"]
    assert {c["change"] for c in assets} == {"created", "deleted"}
    assert any(c["text"].endswith("oncall.md") for c in assets if c["change"] == "created")
    r = client.post("/v1/branches/kb-trial/promote", json={"ids": [assets[0]["id"]]}, headers=steward.h)
    assert r.status_code == 422 and r.json()["error"]["code"] == "not_promotable"
    assert main_dump(admin_engine, steward.org_id) == dump

    # Another org can neither name the branch nor see its knowledge.
    assert client.post("/v1/search", json={"query": "kafka"}, headers=_h(outsider, "kb-trial")).status_code == 404
    assert not _chunks(client, outsider, "kafka lag")

    # A re-run in the branch changes nothing; dropping the branch removes what it wrote.
    again = run_job(steward.org_id, "bootstrap", params, branch="kb-trial")
    assert again.stats["created"] == again.stats["updated"] == 0
    assert all(n > 0 for n in _branch_rows(admin_engine, steward.org_id).values())
    assert client.delete("/v1/branches/kb-trial", headers=steward.h).status_code == 204
    assert _branch_rows(admin_engine, steward.org_id) == {"knowledge_assets": 0, "chunks": 0, "knowledge_nodes": 0}
    assert main_dump(admin_engine, steward.org_id) == dump


def test_private_knowledge_in_a_branch_stays_private_and_is_erased(run_job, world, client, tmp_path, admin_engine):
    org = world.org()
    alice = world.user(org, roles=["admin"])  # the first admin owns operator jobs' private output
    admin, bob = world.user(org, roles=["admin"]), world.user(org)
    assert client.post("/v1/branches", json={"name": "lab"}, headers=admin.h).status_code == 201
    params, _ = _source(tmp_path)
    job = run_job(alice.org_id, "bootstrap", {"path": params["path"], "visibility": "private"}, branch="lab")
    assert job.status == "succeeded", job.error
    assert "second approver" in _chunks(client, alice, "refunds approver", "lab")
    assert not _chunks(client, bob, "refunds approver", "lab")
    assert not _chunks(client, alice, "refunds approver")  # not in main
    assert client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h).status_code == 202
    with admin_engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM knowledge_assets WHERE owner_id = :u"), {"u": alice.user_id}).scalar() == 0
