from __future__ import annotations

import sqlite3

from sqlalchemy import text


def _docs(tmp_path):
    d = tmp_path / "wiki"
    d.mkdir()
    (d / "oncall.md").write_text(
        "# On-call\n\nPage the platform team for kafka lag above 10k.\n\nEscalate to the vendor after 30 minutes."
    )
    (d / "billing.html").write_text(
        "<html><head><style>x{}</style></head><body><h1>Billing</h1>"
        "<p>Invoices are generated on the 1st &amp; sent by the finance team.</p></body></html>"
    )
    (d / "ignore.bin").write_bytes(b"\x00\x01")
    return d


def test_documents_chunks_and_idempotent_rerun(run_job, world, client, admin_engine, tmp_path):
    org = world.org()
    steward = world.user(org, roles=["steward"])
    folder = _docs(tmp_path)
    job = run_job(steward.org_id, "bootstrap", {"path": str(folder), "visibility": "org"})
    assert job.status == "succeeded", job.error
    assert job.stats["created"] == 2 and job.stats["chunks"] >= 2
    hits = client.post("/v1/search", json={"query": "who sends invoices", "types": ["chunk"]}, headers=steward.h).json()
    assert hits["results"] and "finance team" in hits["results"][0]["text"]
    assert "<p>" not in hits["results"][0]["text"] and hits["results"][0]["content_hash"]
    with admin_engine.connect() as c:
        before = c.execute(
            text(
                "SELECT count(*), max(updated_at) FROM chunks JOIN knowledge_assets a ON a.id = chunks.asset_id "
                "WHERE a.org_id = :o"
            ),
            {"o": steward.org_id},
        ).one()
    again = run_job(steward.org_id, "bootstrap", {"path": str(folder), "visibility": "org"})
    assert again.stats["unchanged"] == 2 and again.stats["created"] == again.stats["updated"] == 0
    with admin_engine.connect() as c:
        assert (
            c.execute(
                text(
                    "SELECT count(*), max(updated_at) FROM chunks JOIN knowledge_assets a ON a.id = chunks.asset_id "
                    "WHERE a.org_id = :o"
                ),
                {"o": steward.org_id},
            ).one()
            == before
        )
    # A changed file replaces its chunks; lineage keeps the old chunk ids.
    (folder / "oncall.md").write_text("# On-call\n\nPage the data team for kafka lag above 50k.")
    third = run_job(steward.org_id, "bootstrap", {"path": str(folder), "visibility": "org"})
    assert third.stats["updated"] == 1 and third.stats["unchanged"] == 1
    hits = client.post("/v1/search", json={"query": "kafka lag page", "types": ["chunk"]}, headers=steward.h).json()
    texts = " ".join(h["text"] for h in hits["results"])
    assert "50k" in texts and "10k" not in texts
    with admin_engine.connect() as c:
        edges = c.execute(
            text("SELECT count(*) FROM lineage_edges WHERE org_id = :o AND relation = 'chunk_of'"), {"o": steward.org_id}
        ).scalar()
    assert edges > before[0]


def test_private_bootstrap_is_invisible_to_others(run_job, world, client, tmp_path):
    org = world.org()
    alice = world.user(org, roles=["steward"])
    bob = world.user(org)
    job = run_job(
        alice.org_id, "bootstrap", {"path": str(_docs_copy(tmp_path)), "visibility": "private"}, created_by=alice.user_id
    )
    # API-created jobs may only read under the bootstrap root: an absolute path elsewhere fails cleanly.
    assert job.status == "failed" and "escapes the bootstrap root" in job.error
    job = run_job(alice.org_id, "bootstrap", {"path": str(_docs_copy(tmp_path, "p2")), "visibility": "private"})
    assert job.status == "succeeded", job.error
    assert client.post("/v1/search", json={"query": "invoices secret project", "types": ["chunk"]}, headers=alice.h).json()[
        "results"
    ]
    assert (
        client.post("/v1/search", json={"query": "invoices secret project", "types": ["chunk"]}, headers=bob.h).json()["results"]
        == []
    )


def _docs_copy(tmp_path, name: str = "private"):
    d = tmp_path / name
    d.mkdir()
    (d / "memo.md").write_text("Invoices for the secret project go to the finance team only.")
    return d


def test_schema_and_glossary(run_job, world, client, tmp_path):
    org = world.org()
    steward = world.user(org, roles=["steward"])
    db = tmp_path / "shop.db"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE t_cust (c_id INTEGER PRIMARY KEY, c_nm TEXT NOT NULL);"
        "CREATE TABLE t_ord (o_id INTEGER PRIMARY KEY, c_id INTEGER REFERENCES t_cust(c_id), amt REAL);"
    )
    con.close()
    gl = tmp_path / "glossary.csv"
    gl.write_text(
        "term,meaning,mapping\nquarter,the fiscal quarter starting in February,fiscal_q\n"
        "revenue,sum of order amounts,SUM(t_ord.amt)\n"
    )
    params = {"schema_url": f"sqlite:///{db}", "glossary": str(gl), "visibility": "org"}
    job = run_job(steward.org_id, "bootstrap", params)
    assert job.status == "succeeded", job.error
    assert job.stats["tables"] == 2 and job.stats["schema_hints"] == 2 and job.stats["glossary_terms"] == 2
    res = client.post(
        "/v1/search",
        json={"query": "which table has order amounts", "types": ["memory"], "filters": {"kinds": ["schema_hint"]}},
        headers=steward.h,
    ).json()["results"]
    assert any("t_ord" in r["text"] and "references t_cust" in r["text"] for r in res)
    res = client.post("/v1/search", json={"query": "what does quarter mean", "types": ["memory"]}, headers=steward.h).json()[
        "results"
    ]
    assert "fiscal quarter" in res[0]["text"]
    again = run_job(steward.org_id, "bootstrap", params)
    assert again.stats["schema_hints"] == 0 and again.stats["glossary_terms"] == 0 and again.stats["unchanged"] == 3


def test_a_rederived_term_keeps_a_stewards_narrowing(run_job, world, client, tmp_path):
    """Issue 41: a glossary term a steward narrowed to a group was re-derived at its source's
    scope (org) when its meaning changed, a widening without `declassify`."""
    org = world.org()
    steward = world.user(org, roles=["steward"], groups=["finance"])
    member = world.user(org)
    gl = tmp_path / "glossary.csv"
    gl.write_text("term,meaning,mapping\nquarter,the fiscal quarter starting in February,fiscal_q\n")
    params = {"glossary": str(gl), "visibility": "org"}
    assert run_job(steward.org_id, "bootstrap", params).status == "succeeded"
    hit = client.post("/v1/search", json={"query": "what does quarter mean", "types": ["memory"]}, headers=steward.h).json()[
        "results"
    ][0]
    r = client.patch(f"/v1/memories/{hit['id']}", json={"visibility": "group", "groups": ["finance"]}, headers=steward.h)
    assert r.status_code == 200, r.text
    gl.write_text("term,meaning,mapping\nquarter,the fiscal quarter starting in March,fiscal_q\n")
    assert run_job(steward.org_id, "bootstrap", params).status == "succeeded"
    res = client.post("/v1/search", json={"query": "what does quarter mean", "types": ["memory"]}, headers=steward.h).json()[
        "results"
    ]
    current = next(x for x in res if "March" in x["text"])
    assert (current["visibility"], client.get(f"/v1/memories/{current['id']}", headers=steward.h).json()["groups"]) == (
        "group",
        ["finance"],
    )
    assert all(
        "fiscal quarter" not in x["text"]
        for x in client.post(
            "/v1/search", json={"query": "what does quarter mean", "types": ["memory"]}, headers=member.h
        ).json()["results"]
    )
