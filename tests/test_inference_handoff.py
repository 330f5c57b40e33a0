"""The /v1/context handoff drives the inference tier: the chunk hashes the service authorises are
exactly the keys of the tier's KV store (content addressing agrees), and generation from them
works without re-sending text. Real SmolLM2 weights, CPU."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tier(settings, tmp_path_factory):
    from app.inference.engine import Engine, EngineConfig
    from app.inference.server import create_app
    from app.inference.store import ChunkStore, StoreConfig
    from app.kit.localmodel import local_model_dir

    eng = Engine.load(EngineConfig(model_path=str(local_model_dir(settings.data_dir)), device="cpu", threads=1))
    app = create_app(engine=eng, store=ChunkStore(eng, StoreConfig(root=tmp_path_factory.mktemp("kv"))))
    with TestClient(app) as c:
        yield c


def test_context_handoff_to_cacheblend(client, world, run_job, tier, tmp_path):
    org = world.org()
    alice = world.user(org, roles=["steward"])
    bob = world.user(org)
    d = tmp_path / "docs"
    d.mkdir()
    (d / "zorbia.md").write_text("The capital of Zorbia is Plimton.\n\nZorbia exports copper and tea.")
    assert run_job(alice.org_id, "bootstrap", {"path": str(d), "visibility": "private"}).status == "succeeded"
    ctx = client.post("/v1/context", json={"query": "What is the capital of Zorbia?", "budget_tokens": 400},
                      headers=alice.h).json()
    hashes = [c["content_hash"] for c in ctx["handoff"]["chunks"]]
    assert hashes, ctx
    texts = [i["text"] for s in ctx["sections"] if s["name"] == "knowledge" for i in s["items"]]
    # The bootstrap hook would warm the tier; here the same texts are precomputed explicitly.
    assert tier.post("/v1/chunks", json={"texts": texts}).json()["content_hashes"] == hashes
    r = tier.post("/v1/generate", json={"prompt": ctx["handoff"]["prompt"], "chunks": [{"content_hash": h} for h in hashes],
                                        "cartridges": ctx["handoff"]["cartridges"] and [], "max_tokens": 8, "mode": "blend"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["prompt_tokens"] > 0 and out["timings"]["ttft_s"] > 0 and isinstance(out["text"], str)
    # bob's handoff never names alice's private chunks.
    other = client.post("/v1/context", json={"query": "What is the capital of Zorbia?", "budget_tokens": 400},
                        headers=bob.h).json()
    assert not set(hashes) & {c["content_hash"] for c in other["handoff"]["chunks"]}
    # An unknown hash is a 4xx in the error shape.
    bad = tier.post("/v1/generate", json={"prompt": "x", "chunks": [{"content_hash": "0" * 64}], "max_tokens": 2,
                                          "mode": "blend"})
    assert 400 <= bad.status_code < 500 and set(bad.json()["error"]) == {"code", "message"}


def test_forgetting_a_user_drops_their_chunk_kv(client, world, run_job, tier, tmp_path, monkeypatch):
    from app.orgs import forget

    org = world.org()
    alice = world.user(org, roles=["steward"])
    d = tmp_path / "kvdocs"
    d.mkdir()
    (d / "secret.md").write_text("Alice's private project codename is Bluebird.")
    # An operator run owned by the org's only steward: alice owns the asset (private to her).
    assert run_job(alice.org_id, "bootstrap", {"path": str(d), "visibility": "private"}, created_by=None).status == "succeeded"
    admin = world.user(org, roles=["admin"])
    hits = client.post("/v1/search", json={"query": "project codename Bluebird", "types": ["chunk"]}, headers=alice.h).json()
    texts = [h["text"] for h in hits["results"]]
    hashes = tier.post("/v1/chunks", json={"texts": texts}).json()["content_hashes"]
    assert hashes == [h["content_hash"] for h in hits["results"]]
    assert hashes
    # Route the service's call to the in-process tier (no network): the same DELETE request.
    monkeypatch.setattr(forget, "drop_chunk_kv", lambda url, hs, timeout_s=10.0: sum(
        bool(tier.delete(f"/v1/chunks/{h}").json()["deleted"]) for h in set(hs)))
    r = client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h)
    job = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=admin.h).json()
    assert job["stats"]["chunk_kv_deleted"] == len(set(hashes))
    gen = tier.post("/v1/generate", json={"prompt": "x", "chunks": [{"content_hash": hashes[0]}], "max_tokens": 2,
                                          "mode": "blend"})
    assert gen.status_code == 404
