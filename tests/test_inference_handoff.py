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
    from app.kit.runtime.localmodel import local_model_dir

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
    ctx = client.post(
        "/v1/context", json={"query": "What is the capital of Zorbia?", "budget_tokens": 400}, headers=alice.h
    ).json()
    hashes = [c["content_hash"] for c in ctx["handoff"]["chunks"]]
    assert hashes, ctx
    texts = [i["text"] for s in ctx["sections"] if s["name"] == "knowledge" for i in s["items"]]
    # The bootstrap hook would warm the tier; here the same texts are precomputed explicitly.
    assert tier.post("/v1/chunks", json={"texts": texts}, headers=tier.operator).json()["content_hashes"] == hashes
    # The handoff's own token is the credential: it authorises exactly these hashes.
    bearer = {"Authorization": f"Bearer {ctx['handoff']['token']}"}
    r = tier.post(
        "/v1/generate",
        json={
            "prompt": ctx["handoff"]["prompt"],
            "chunks": [{"content_hash": h} for h in hashes],
            "cartridges": ctx["handoff"]["cartridges"] and [],
            "max_tokens": 8,
            "mode": "blend",
        },
        headers=bearer,
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["prompt_tokens"] > 0 and out["timings"]["ttft_s"] > 0 and isinstance(out["text"], str)
    # bob's handoff never names alice's private chunks.
    other = client.post(
        "/v1/context", json={"query": "What is the capital of Zorbia?", "budget_tokens": 400}, headers=bob.h
    ).json()
    assert not set(hashes) & {c["content_hash"] for c in other["handoff"]["chunks"]}
    # bob's token cannot reach alice's stored chunks: the same 404 as a hash nobody stored.
    bob_bearer = {"Authorization": f"Bearer {other['handoff']['token']}"}
    stolen = tier.post(
        "/v1/generate", json={"prompt": "x", "chunks": [{"content_hash": hashes[0]}], "max_tokens": 2}, headers=bob_bearer
    )
    absent = tier.post(
        "/v1/generate", json={"prompt": "x", "chunks": [{"content_hash": "0" * 64}], "max_tokens": 2}, headers=tier.operator
    )
    assert stolen.status_code == absent.status_code == 404
    assert stolen.json()["error"]["code"] == absent.json()["error"]["code"] == "chunk_not_found"
    # Without credentials nothing is served.
    assert (
        tier.post("/v1/generate", json={"prompt": "x", "chunks": [{"content_hash": hashes[0]}], "max_tokens": 2}).status_code
        == 401
    )


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
    from app.erasure import endpoints as erasure_endpoints
    from app.kit.runtime.tier import TierClient

    monkeypatch.setattr(erasure_endpoints, "tier_client", lambda settings: TierClient(tier, settings.inference_secret()))
    r = client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h)
    job = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=admin.h).json()
    assert job["stats"]["chunk_kv_deleted"] == len(set(hashes))
    gen = tier.post(
        "/v1/generate",
        json={"prompt": "x", "chunks": [{"content_hash": hashes[0]}], "max_tokens": 2, "mode": "blend"},
        headers=tier.operator,
    )
    assert gen.status_code == 404


def test_forgetting_a_user_erases_cartridges_trained_on_their_assets(
    client, world, run_job, tier, here, tmp_path, monkeypatch, swap_state
):
    """A cartridge is the user's text in another form (trained KV; self-study conversations in plain
    text on disk): erasure removes its folder, the tier's loaded copy, and every cartridge trained
    on the user's assets, a stale one included. Before, erasure only marked them stale."""
    import pipelines.cartridges.trainer as trainer
    from app.erasure import endpoints as erasure_endpoints
    from app.inference.cartridge import Cartridge, CartridgeDirectory
    from app.kit.runtime.tier import TierClient

    eng = tier.app.state.engine

    def train(texts, hashes, out_dir, p, steps, **kw):
        ids = eng.tokenizer("\n\n".join(texts))["input_ids"]
        cart = Cartridge.from_tokens(eng.model, ids, 4, model_id=eng.model_id, content_hashes=hashes)
        (out_dir / "selfstudy").mkdir(parents=True, exist_ok=True)
        (out_dir / "selfstudy" / "shard-0.jsonl").write_text(f'{{"text": "{texts[0]}"}}\n')
        return cart.save(out_dir / "cartridge.safetensors"), {"model_id": eng.model_id, "p": 4}

    monkeypatch.setattr(trainer, "train_cartridge", train)
    swap_state(client.app.state, "settings", here)
    swap_state(tier.app.state, "resolve_cartridges", CartridgeDirectory(here.data_dir / "cartridges", model_id=eng.model_id))
    monkeypatch.setattr(erasure_endpoints, "tier_client", lambda s: TierClient(tier, s.inference_secret()))
    org = world.org()
    alice = world.user(org, roles=["steward"])  # the org's only steward: an operator run's assets are hers
    d = tmp_path / "cdocs"
    d.mkdir()
    (d / "plan.md").write_text("Alice's private plan: the Osprey launch moves to June.")
    boot = {"path": str(d), "visibility": "private"}
    assert run_job(alice.org_id, "bootstrap", boot, with_settings=here).status == "succeeded"
    old = run_job(alice.org_id, "train_cartridge", {"p": 4}, with_settings=here)
    (d / "plan.md").write_text("Alice's private plan: the Osprey launch moves to July.")  # the first goes stale
    assert run_job(alice.org_id, "bootstrap", boot, with_settings=here).status == "succeeded"
    new = run_job(alice.org_id, "train_cartridge", {"p": 4}, with_settings=here)
    assert old.status == new.status == "succeeded", (old.error, new.error)
    folders = [here.data_dir / "cartridges" / str(j.id) for j in (old, new)]
    assert all((f / "selfstudy" / "shard-0.jsonl").is_file() for f in folders)
    ctx = client.post("/v1/context", json={"query": "Osprey launch", "budget_tokens": 300}, headers=alice.h).json()
    assert [c["id"] for c in ctx["handoff"]["cartridges"]] == [str(new.id)]
    use = {"prompt": "When is the launch?", "cartridges": [str(new.id)], "max_tokens": 2, "mode": "prefix"}
    bearer = {"Authorization": f"Bearer {ctx['handoff']['token']}"}
    assert tier.post("/v1/generate", json=use, headers=bearer).status_code == 200  # loaded: now in the tier's cache
    admin = world.user(org, roles=["admin"])
    r = client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h)
    assert r.status_code == 202
    stats = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=admin.h).json()["stats"]
    assert (stats["cartridges_erased"], stats["cartridge_folders_removed"]) == (2, 2)
    assert stats["tier_cartridges_dropped"] == 1  # the one it had loaded
    assert not any(f.exists() for f in folders)
    # The token issued before the erasure names the cartridge: the tier no longer has it.
    gone = tier.post("/v1/generate", json=use, headers=bearer)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "cartridge_not_found"
    from sqlalchemy import text as sql

    with world.engine.begin() as c:
        rows = c.execute(sql("SELECT status FROM cartridges WHERE id = ANY(:ids)"), {"ids": [old.id, new.id]}).scalars().all()
        events = c.execute(
            sql("SELECT count(*) FROM audit_log WHERE action = 'cartridge.erase' AND org_id = :o"), {"o": alice.org_id}
        ).scalar()
    assert sorted(rows) == ["erased", "erased"] and events == 2
