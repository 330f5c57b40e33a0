"""Bootstrap on the bulk path (documents embedded ahead of their writes in one pass, chunks and
lineage written set-based) stores what the row-by-row path stored."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from sqlalchemy import text

LONG = "\n\n".join(
    f"Section {i}. The {w} service pages the on-call engineer when its queue lag passes {i * 7}k messages; "
    f"the runbook for {w} says to drain the consumer group, check the broker disk and escalate after {i + 20} minutes."
    for i, w in enumerate(["ledger", "harbour", "orchard", "glacier", "pylon", "quarry", "tundra", "delta"] * 4)
)


def _corpus(tmp_path):
    d = tmp_path / "wiki"
    d.mkdir()
    (d / "oncall.md").write_text("# On-call\n\nPage the platform team for kafka lag above 10k.\n\nEscalate after 30 minutes.")
    (d / "runbooks.md").write_text("# Runbooks\n\n" + LONG)
    (d / "billing.html").write_text("<html><body><h1>Billing</h1><p>Invoices are sent by the finance team.</p></body></html>")
    (d / "empty.md").write_text("")
    db = tmp_path / "shop.db"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE t_cust (c_id INTEGER PRIMARY KEY, c_nm TEXT NOT NULL);"
        "CREATE TABLE t_ord (o_id INTEGER PRIMARY KEY, c_id INTEGER REFERENCES t_cust(c_id), amt REAL);"
    )
    con.close()
    gl = tmp_path / "glossary.csv"
    gl.write_text("term,meaning,mapping\nrevenue,sum of order amounts,SUM(t_ord.amt)\n")
    return {"path": str(d), "schema_url": f"sqlite:///{db}", "glossary": str(gl), "visibility": "group", "groups": ["ops"]}


def _stored(engine, org_id) -> dict:
    """What a bootstrap leaves in the org, keyed by what both runs share (uris, ords), not ids."""
    q = {"o": org_id}
    with engine.connect() as c:
        assets = {
            r.id: r
            for r in c.execute(
                text(
                    "SELECT id, kind, source_uri, title, content_hash, metadata::text AS meta, status, visibility, groups, "
                    "labels FROM knowledge_assets WHERE org_id = :o"
                ),
                q,
            )
        }
        uri = {a: r.source_uri for a, r in assets.items()}
        chunks = {
            r.id: r
            for r in c.execute(
                text(
                    "SELECT id, asset_id, ord, text, content_hash, token_count, embedding::text AS v, visibility, groups, "
                    "labels, tsv::text AS tsv, branch_id FROM chunks WHERE org_id = :o"
                ),
                q,
            )
        }
        key = {i: (uri[r.asset_id], r.ord) for i, r in chunks.items()}
        edges = sorted(
            (str(key.get(r.from_id, r.from_type)), r.relation, uri.get(r.to_id, r.to_type), r.job_id is not None)
            for r in c.execute(
                text("SELECT from_type, from_id, relation, to_id, to_type, job_id FROM lineage_edges WHERE org_id = :o"), q
            )
            if r.from_type == "chunk" or r.to_type == "asset"
        )
        buckets = sorted(
            c.execute(
                text(
                    "SELECT bucket, sum(n), sum(total_len) FROM bm25_buckets WHERE org_id = :o AND item_type = 'chunk' "
                    "GROUP BY bucket HAVING sum(n) <> 0"
                ),
                q,
            ).all()
        )
        df = sorted(
            c.execute(
                text(
                    "SELECT bucket, lexeme, sum(df) FROM bm25_df WHERE org_id = :o AND item_type = 'chunk' "
                    "GROUP BY bucket, lexeme HAVING sum(df) <> 0"
                ),
                q,
            ).all()
        )
        owned = sorted(
            c.execute(
                text(
                    "SELECT visibility, groups, labels, sum(n) FROM bm25_owned WHERE org_id = :o AND item_type = 'chunk' "
                    "GROUP BY visibility, groups, labels HAVING sum(n) <> 0"
                ),
                q,
            ).all()
        )
        audit = sorted(
            (r.action, r.details["uri"], r.details["chunks"], len(r.details["replaced_chunks"]))
            for r in c.execute(text("SELECT action, details FROM audit_log WHERE org_id = :o AND action LIKE 'asset.%'"), q)
        )
    return {
        "assets": sorted(tuple(r[1:]) for r in assets.values()),
        "chunks": {key[i]: tuple(r[2:6]) + tuple(r[7:]) for i, r in chunks.items()},
        "vectors": {key[i]: np.array([float(x) for x in r.v.strip("[]").split(",")]) for i, r in chunks.items()},
        "edges": edges,
        "bm25": (buckets, df, owned),
        "audit": audit,
    }


def _same(a: dict, b: dict) -> None:
    for k in ("assets", "chunks", "edges", "bm25", "audit"):
        assert a[k] == b[k], k
    assert a["vectors"].keys() == b["vectors"].keys()
    for k, v in a["vectors"].items():  # one call per document vs calls shared across documents: padding only
        assert np.allclose(v, b["vectors"][k], atol=1e-4), k


@pytest.fixture
def counted(embedder, monkeypatch):
    """The texts of each call of the shared embedder (the real model underneath)."""
    calls: list[int] = []
    real = embedder.embed

    def embed(texts, *args, **kwargs):
        calls.append(len(texts))
        return real(texts, *args, **kwargs)

    monkeypatch.setattr(embedder, "embed", embed)
    return calls


def test_bulk_bootstrap_stores_what_the_row_by_row_path_stored(run_job, world, admin_engine, tmp_path, monkeypatch, counted):
    from pipelines.bootstrap import job as bootstrap

    params = _corpus(tmp_path)
    org_old, org_new = world.org(), world.org()
    old, new = world.user(org_old, roles=["steward"], groups=["ops"]), world.user(org_new, roles=["steward"], groups=["ops"])
    monkeypatch.setattr(bootstrap, "BULK", False)
    a = run_job(old.org_id, "bootstrap", params)
    assert a.status == "succeeded", a.error
    monkeypatch.setattr(bootstrap, "BULK", True)
    b = run_job(new.org_id, "bootstrap", params)
    assert b.status == "succeeded", b.error
    assert a.stats == b.stats and b.stats["chunks"] >= 8
    first_old, first_new = _stored(admin_engine, old.org_id), _stored(admin_engine, new.org_id)
    _same(first_old, first_new)
    assert first_new["bm25"][0] and first_new["bm25"][1]  # the statement-level triggers saw the set-based rows

    # A changed document replaces its chunks (the old ones stay in lineage), an unchanged one is skipped.
    (tmp_path / "wiki" / "runbooks.md").write_text("# Runbooks\n\n" + LONG.replace("broker disk", "broker quota"))
    monkeypatch.setattr(bootstrap, "BULK", False)
    a2 = run_job(old.org_id, "bootstrap", params)
    monkeypatch.setattr(bootstrap, "BULK", True)
    del counted[:]
    b2 = run_job(new.org_id, "bootstrap", params)
    assert a2.status == b2.status == "succeeded" and a2.stats == b2.stats and b2.stats["updated"] == 1
    _same(_stored(admin_engine, old.org_id), _stored(admin_engine, new.org_id))
    # Only the changed document was embedded, its chunks in one call.
    assert counted[0] == len([k for k in first_new["chunks"] if k[0].endswith("runbooks.md")])


def test_bulk_bootstrap_embeds_the_documents_in_one_pass(run_job, world, tmp_path, counted):
    org = world.org()
    steward = world.user(org, roles=["steward"])
    d = tmp_path / "many"
    d.mkdir()
    for i in range(12):
        (d / f"note{i}.md").write_text(f"# Note {i}\n\nThe {i}th pylon of the harbour crane was inspected on day {i}.")
    job = run_job(steward.org_id, "bootstrap", {"path": str(d), "visibility": "org"})
    assert job.status == "succeeded", job.error
    assert job.stats["created"] == 12 and job.stats["chunks"] == 12
    assert counted == [12]  # one call for twelve documents, not one per document


def test_a_failed_document_rolls_back_alone_and_a_rerun_resumes(run_job, world, admin_engine, tmp_path, embedder, monkeypatch):
    """The unit of commit stays one source: a failing embedding fails the job, the documents
    written before it stay, and a re-run writes the rest (nothing twice)."""
    org = world.org()
    steward = world.user(org, roles=["steward"])
    d = tmp_path / "docs"
    d.mkdir()
    for i in range(3):
        (d / f"n{i}.md").write_text(
            f"# N{i}\n\n" + "\n\n".join(f"Paragraph {k} of note {i} about the quarry." for k in range(150))
        )
    from pipelines.bootstrap import ahead

    monkeypatch.setattr(ahead, "EMBED_CHUNK", 1)  # one document per call
    real, calls = embedder.embed, []

    def failing(texts, *args, **kwargs):
        calls.append(len(texts))
        if len(calls) == 2:
            raise RuntimeError("model crashed")
        return real(texts, *args, **kwargs)

    monkeypatch.setattr(embedder, "embed", failing)
    job = run_job(steward.org_id, "bootstrap", {"path": str(d), "visibility": "org"})
    assert job.status == "failed"
    with admin_engine.connect() as c:
        count = (
            "SELECT (SELECT count(*) FROM knowledge_assets WHERE org_id = :o), (SELECT count(*) FROM chunks WHERE org_id = :o)"
        )
        assets, chunks = c.execute(text(count), {"o": steward.org_id}).one()
    assert assets == 1 and chunks > 0
    monkeypatch.setattr(embedder, "embed", real)
    again = run_job(steward.org_id, "bootstrap", {"path": str(d), "visibility": "org"})
    assert again.status == "succeeded" and again.stats["unchanged"] == 1 and again.stats["created"] == 2
