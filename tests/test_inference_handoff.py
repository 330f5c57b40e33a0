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
    key = settings.inference_secret()  # the same shared key the service signs handoffs with
    app = create_app(engine=eng, store=ChunkStore(eng, StoreConfig(root=tmp_path_factory.mktemp("kv"))), key=key)
    with TestClient(app) as c:
        c.operator = {"Authorization": f"Bearer {key.decode()}"}
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
    assert tier.post("/v1/chunks", json={"texts": texts}, headers=tier.operator).json()["content_hashes"] == hashes
    # The handoff's own token is the credential: it authorises exactly these hashes.
    bearer = {"Authorization": f"Bearer {ctx['handoff']['token']}"}
    r = tier.post("/v1/generate", json={"prompt": ctx["handoff"]["prompt"], "chunks": [{"content_hash": h} for h in hashes],
                                        "cartridges": ctx["handoff"]["cartridges"] and [], "max_tokens": 8, "mode": "blend"},
                  headers=bearer)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["prompt_tokens"] > 0 and out["timings"]["ttft_s"] > 0 and isinstance(out["text"], str)
    # bob's handoff never names alice's private chunks.
    other = client.post("/v1/context", json={"query": "What is the capital of Zorbia?", "budget_tokens": 400},
                        headers=bob.h).json()
    assert not set(hashes) & {c["content_hash"] for c in other["handoff"]["chunks"]}
    # bob's token cannot reach alice's stored chunks: the same 404 as a hash nobody stored.
    bob_bearer = {"Authorization": f"Bearer {other['handoff']['token']}"}
    stolen = tier.post("/v1/generate", json={"prompt": "x", "chunks": [{"content_hash": hashes[0]}], "max_tokens": 2},
                       headers=bob_bearer)
    absent = tier.post("/v1/generate", json={"prompt": "x", "chunks": [{"content_hash": "0" * 64}], "max_tokens": 2},
                       headers=tier.operator)
    assert stolen.status_code == absent.status_code == 404
    assert stolen.json()["error"]["code"] == absent.json()["error"]["code"] == "chunk_not_found"
    # Without credentials nothing is served.
    assert tier.post("/v1/generate", json={"prompt": "x", "chunks": [{"content_hash": hashes[0]}],
                                           "max_tokens": 2}).status_code == 401


def test_forgetting_a_user_drops_their_chunk_kv(client, world, run_job, tier, tmp_path, monkeypatch):
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
    hashes = tier.post("/v1/chunks", json={"texts": texts}, headers=tier.operator).json()["content_hashes"]
    assert hashes == [h["content_hash"] for h in hits["results"]]
    assert hashes
    # Route the service's call to the in-process tier (no network): the same authenticated DELETEs.
    from app.kit.tier import TierClient
    from app.orgs import endpoints as org_endpoints

    monkeypatch.setattr(org_endpoints, "tier_client", lambda settings: TierClient(tier, settings.inference_secret()))
    r = client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h)
    job = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=admin.h).json()
    assert job["stats"]["chunk_kv_deleted"] == len(set(hashes))
    gen = tier.post("/v1/generate", json={"prompt": "x", "chunks": [{"content_hash": hashes[0]}], "max_tokens": 2,
                                          "mode": "blend"}, headers=tier.operator)
    assert gen.status_code == 404
