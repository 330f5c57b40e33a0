"""Enrichment in bootstrap and knowledge navigation (issue 17), always under visible_to."""

from __future__ import annotations

import sqlite3
import uuid

from pipelines.bootstrap import enrich
from pipelines.bootstrap.sources import TableInfo


def _source(tmp_path, name: str = "shop"):
    db = tmp_path / f"{name}.db"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE customers (customer_id INTEGER PRIMARY KEY, rg TEXT NOT NULL);"
        "CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer_id INTEGER, amt REAL, st TEXT);"
        "INSERT INTO customers VALUES (1, 'R1'), (2, 'R2'), (3, 'R1');"
        "INSERT INTO orders VALUES (1, 1, 10.5, 'OK'), (2, 2, 20, 'X'), (3, 3, 7, 'OK');"
    )
    con.close()
    gl = tmp_path / f"{name}_glossary.csv"
    gl.write_text(
        "term,meaning,mapping\nrevenue,sum of order amounts,SUM(orders.amt)\n"
        "EMEA,customers in the EMEA region,customers.rg = 'R1'\n"
    )
    docs = tmp_path / f"{name}_docs"
    docs.mkdir()
    (docs / "runbook.md").write_text(
        "# Runbook\n\nIntro line.\n\n## Refunds\n\nRefunds above 500 EUR need a "
        "second approver. They are booked on the next business day.\n\n"
        "## Outages\n\nPage the platform team first."
    )
    return {"schema_url": f"sqlite:///{db}", "glossary": str(gl), "path": str(docs)}, db


def _tree(client, actor, path=None, **page):
    params = {"path": path} if path else {}
    return client.get("/v1/knowledge/tree", params={**params, **page}, headers=actor.h)


def test_pure_enrichment_steps():
    t = TableInfo(
        None,
        "orders",
        None,
        [{"name": "customer_id", "type": "INTEGER", "nullable": True}, {"name": "order_dt", "type": "TEXT", "nullable": False}],
        [],
    )
    c = TableInfo(
        None, "customers", None, [{"name": "customer_id", "type": "INTEGER", "nullable": False, "primary_key": True}], []
    )
    joins = enrich.join_paths([t, c])
    assert joins["orders"] == [{"from": "orders.customer_id", "to": "customers.customer_id", "via": "matching names"}]
    assert "order date" in enrich.describe_column(
        t.columns[1], {"rows": 3, "distinct": 2, "nulls": 0, "values": ["a", "b"]}, primary=False
    )
    secs = enrich.sections("Runbook", "# Runbook\n\nIntro.\n\n## Refunds\n\nOne. Two.")
    assert [s.title for s in secs] == ["Runbook", "Refunds"] and secs[1].abstract == "One. Two."
    assert enrich.term_refs("SUM(orders.amt) where t.x = 1", {"orders.amt"}) == ["orders.amt"]
    long = " ".join(f"w{i}." for i in range(100))
    assert len(enrich.abstract(long).split()) <= enrich.ABSTRACT_WORDS + 1


def test_bootstrap_enriches_and_the_tree_navigates(run_job, world, client, tmp_path, admin_engine):
    org = world.org()
    steward = world.user(org, roles=["steward"])
    member = world.user(org)
    params, _ = _source(tmp_path)
    job = run_job(steward.org_id, "bootstrap", {**params, "visibility": "org"})
    assert job.status == "succeeded", job.error
    assert job.stats["enriched_tables"] == 2 and job.stats["enriched_documents"] == 1 and job.stats["linked_terms"] >= 2
    root = _tree(client, member).json()
    assert {c["path"] for c in root["children"]} == {"shop", "docs", "glossary"}
    assert [c["path"] for c in _tree(client, member, "shop").json()["children"]] == ["shop/main"]
    tables = _tree(client, member, "shop/main").json()["children"]
    assert [t["name"] for t in tables] == ["customers", "orders"] and all(t["kind"] == "table" for t in tables)
    orders = client.get(f"/v1/knowledge/nodes/{tables[1]['id']}", headers=member.h).json()
    assert [c["name"] for c in orders["children"]] == ["amt", "customer_id", "order_id", "st"]
    assert "orders.customer_id = customers.customer_id" in orders["text"]  # a join path from matching names
    assert "2 distinct values: OK, X" in orders["text"]  # statistics of the source
    assert "revenue: SUM(orders.amt)" in orders["text"]  # a glossary term linked to its column
    kinds = {link["type"] for link in orders["links"]}
    assert {"glossary_term", "join", "memory", "lineage"} <= kinds
    assert any(link["type"] == "memory" and link["kind"] == "schema_hint" for link in orders["links"])
    assert any(link["type"] == "lineage" and link["relation"] == "enriched_from" for link in orders["links"])
    amt = next(c for c in orders["children"] if c["name"] == "amt")
    col = client.get(f"/v1/knowledge/nodes/{amt['id']}", headers=member.h).json()
    assert col["kind"] == "column" and [t["name"] for t in col["links"] if t["type"] == "glossary_term"] == ["revenue"]
    sections = _tree(client, member, "docs/runbook.md").json()["children"]
    assert [s["name"] for s in sections] == ["Runbook", "Refunds", "Outages"]
    refunds = client.get(f"/v1/knowledge/nodes/{sections[1]['id']}", headers=member.h).json()
    assert refunds["text"].startswith("Refunds: Refunds above 500 EUR need a second approver.")
    # unchanged source: nothing re-enriched; a changed source is re-enriched
    again = run_job(steward.org_id, "bootstrap", {**params, "visibility": "org"})
    assert again.stats["enriched_tables"] == 0 and again.stats["unchanged"] == 4
    con = sqlite3.connect(params["schema_url"].removeprefix("sqlite:///"))
    con.execute("INSERT INTO orders VALUES (4, 1, 3, 'VOID')")
    con.commit()
    con.close()
    third = run_job(steward.org_id, "bootstrap", {**params, "visibility": "org"})
    assert third.stats["enriched_tables"] == 1 and third.stats["updated"] == 1
    orders = client.get(f"/v1/knowledge/nodes/{tables[1]['id']}", headers=member.h).json()  # same id after re-run
    assert "3 distinct values" in orders["text"]
    assert _tree(client, member, "nope/nothing").status_code == 404


def test_nodes_of_invisible_assets_never_appear(run_job, world, client, tmp_path):
    org = world.org()
    owner = world.user(org, roles=["steward"])  # the first steward owns operator jobs' private output
    member = world.user(org)
    stranger = world.user(world.org(), roles=["admin"])
    shared, _ = _source(tmp_path, "shared")
    secret, _ = _source(tmp_path, "secret")
    assert run_job(owner.org_id, "bootstrap", {"schema_url": shared["schema_url"], "visibility": "org"}).status == "succeeded"
    assert run_job(owner.org_id, "bootstrap", {**secret, "visibility": "private"}).status == "succeeded"
    assert {c["path"] for c in _tree(client, owner, None).json()["children"]} == {"shared", "secret", "docs", "glossary"}
    assert {c["path"] for c in _tree(client, member, None).json()["children"]} == {"shared"}
    assert _tree(client, stranger, None).json()["children"] == []
    secret_tables = _tree(client, owner, "secret/main").json()["children"]
    secret_node = client.get(f"/v1/knowledge/nodes/{secret_tables[0]['id']}", headers=owner.h)
    assert secret_node.status_code == 200
    for actor in (member, stranger):
        assert client.get(f"/v1/knowledge/nodes/{secret_tables[0]['id']}", headers=actor.h).status_code == 404
        assert _tree(client, actor, "secret/main").status_code == 404
        assert _tree(client, actor, "docs").status_code == 404
    shared_tables = _tree(client, member, "shared/main").json()["children"]
    assert client.get(f"/v1/knowledge/nodes/{shared_tables[0]['id']}", headers=stranger.h).status_code == 404
    # the secret glossary maps the shared tables' column names too: its terms never link for the member
    shared_orders = client.get(f"/v1/knowledge/nodes/{shared_tables[1]['id']}", headers=member.h).json()
    assert not [link for link in shared_orders["links"] if link["type"] == "glossary_term"]
    assert "revenue" not in shared_orders["text"]
    assert client.get(f"/v1/knowledge/nodes/{uuid.uuid4()}", headers=member.h).status_code == 404
    assert client.get("/v1/knowledge/nodes/not-a-uuid", headers=member.h).status_code == 422
    assert client.get("/v1/knowledge/tree").status_code == 401


def test_browse_tool_and_client(run_job, world, client, tmp_path):
    from app.client import MemscaleClient

    org = world.org()
    steward = world.user(org, roles=["steward"])
    member = world.user(org)
    params, _ = _source(tmp_path, "wh")
    assert run_job(steward.org_id, "bootstrap", {**params, "visibility": "org"}).status == "succeeded"
    mc = MemscaleClient(base_url="", api_key=member.key, transport=client)
    assert "browse" in {t["function"]["name"] for t in mc.list_tools()["tools"]}
    sid = mc.create_session()["id"]
    top = mc.call_tool(sid, "browse", {})
    assert top["ok"] and "- catalog wh" in top["text"]
    tables = mc.call_tool(sid, "browse", {"path": "wh/main"})
    assert "- table wh/main/orders" in tables["text"]
    node_id = mc.knowledge_tree("wh/main")["children"][1]["id"]
    one = mc.call_tool(sid, "browse", {"node_id": node_id})
    assert one["ok"] and "revenue: SUM(orders.amt)" in one["text"] and one["path"] == "wh/main/orders"
    assert mc.knowledge_node(node_id)["name"] == "orders"
    missing = mc.call_tool(sid, "browse", {"path": "nowhere"})
    assert missing["ok"] is False and missing["error"]["code"] == "not_found"
    stranger = world.user(world.org())  # another org's agent browses nothing of this org's tree
    sc = MemscaleClient(base_url="", api_key=stranger.key, transport=client)
    ssid = sc.create_session()["id"]
    assert sc.call_tool(ssid, "browse", {})["text"] == "(empty)"
    assert sc.call_tool(ssid, "browse", {"node_id": node_id})["error"]["code"] == "not_found"
    assert sc.call_tool(ssid, "browse", {"path": "wh/main"})["ok"] is False
    hits = mc.search("amounts", instruction="only schema hints, bootstrapped")
    assert hits["interpreted"]["filters"] == {"kinds": ["schema_hint"], "source": ["bootstrap"]}
    assert hits["results"] and all(r["kind"] == "schema_hint" for r in hits["results"])


def test_bad_paths_are_a_clear_4xx(client, world):
    member = world.user(world.org())
    assert _tree(client, member, "a\x00b").status_code == 422
    assert _tree(client, member, "x" * 2001).status_code == 422
    assert _tree(client, member, "no/such/path").status_code == 404
    assert _tree(client, member, None, limit=0).status_code == 422
    assert _tree(client, member, None, limit=1001).status_code == 422
    assert _tree(client, member, None, limit="many").status_code == 422
    assert _tree(client, member, None, after="a\x00b").status_code == 422


def test_tree_pages_hold_only_visible_children(run_job, world, client, tmp_path):
    """Paging (limit, after=next) lists exactly the full listing's visible children: another
    user's private tables under the same schema path neither appear, nor count towards
    `truncated`, nor leak through `next`; an `after` naming a hidden path reveals nothing."""
    org = world.org()
    owner = world.user(org, roles=["steward"])  # the first steward owns operator jobs' private output
    member = world.user(org)
    (tmp_path / "a").mkdir()
    shared, _ = _source(tmp_path / "a", "shop")
    private = tmp_path / "b"
    private.mkdir()
    con = sqlite3.connect(private / "shop.db")  # the same catalog and schema path: shop/main
    con.executescript(
        "CREATE TABLE bonus (id INTEGER PRIMARY KEY); CREATE TABLE payroll (id INTEGER PRIMARY KEY);"
        "CREATE TABLE zeta (id INTEGER PRIMARY KEY);"
    )
    con.close()
    assert run_job(owner.org_id, "bootstrap", {"schema_url": shared["schema_url"], "visibility": "org"}).status == "succeeded"
    assert (
        run_job(owner.org_id, "bootstrap", {"schema_url": f"sqlite:///{private / 'shop.db'}", "visibility": "private"}).status
        == "succeeded"
    )

    def pages(actor, limit, after=None):
        out = []
        while True:
            r = _tree(client, actor, "shop/main", limit=limit, after=after)
            assert r.status_code == 200
            body = r.json()
            assert len(body["children"]) <= limit and body["node"]["path"] == "shop/main"
            out.append([c["name"] for c in body["children"]])
            assert body["truncated"] == (body["next"] is not None)
            if body["next"] is None:
                return out, body
            assert body["next"] == body["children"][-1]["path"]
            after = body["next"]

    full = _tree(client, owner, "shop/main").json()
    assert [c["name"] for c in full["children"]] == ["bonus", "customers", "orders", "payroll", "zeta"]
    assert full["truncated"] is False and full["next"] is None
    assert pages(owner, 2)[0] == [["bonus", "customers"], ["orders", "payroll"], ["zeta"]]
    member_full = _tree(client, member, "shop/main").json()
    assert [c["name"] for c in member_full["children"]] == ["customers", "orders"]
    member_pages, last = pages(member, 1)
    assert member_pages == [["customers"], ["orders"]]  # nothing after orders counts: payroll, zeta are hidden
    assert last["children"][0]["id"] == member_full["children"][1]["id"]
    hidden = _tree(client, member, "shop/main", after="shop/main/bonus").json()
    assert [c["name"] for c in hidden["children"]] == ["customers", "orders"] and hidden["next"] is None
    assert _tree(client, member, "shop/main", after="shop/main/orders").json()["children"] == []
    stranger = world.user(world.org(), roles=["admin"])
    assert _tree(client, stranger, "shop/main", limit=1).status_code == 404
