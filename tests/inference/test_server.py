"""The inference tier's HTTP API (FastAPI TestClient, real model)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.inference.blend import BlendConfig, n_recompute, planned_recompute
from app.inference.server import CartridgeNotFound, create_app
from app.inference.store import content_hash

QUESTION = "Where does the person who discovered comet K-17 work?"
KEY = b"test-operator-key"
OPERATOR = {"Authorization": f"Bearer {KEY.decode()}"}


def _client(app) -> TestClient:
    return TestClient(app, raise_server_exceptions=False, headers=OPERATOR)


@pytest.fixture()
def client(engine, store):
    with _client(create_app(engine=engine, store=store, key=KEY)) as c:
        yield c


def _assert_error(resp, status, code):
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code and body["error"]["message"]


def test_healthz(client, engine):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["model_id"] == engine.model_id


def test_chunks_then_generate_by_hash(client, store, texts, engine):
    r = client.post("/v1/chunks", json={"texts": texts})
    assert r.status_code == 200
    hashes = r.json()["content_hashes"]
    assert hashes == [content_hash(t) for t in texts] and all(store.has(h) for h in hashes)
    r = client.post(
        "/v1/generate",
        json={"prompt": QUESTION, "chunks": [{"content_hash": h} for h in hashes], "max_tokens": 8, "mode": "blend"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["text"].strip()
    n_chunk = sum(engine.chunk_ids(t).numel() for t in texts)
    assert body["prompt_tokens"] == engine.system_ids.numel() + n_chunk + engine.query_ids(QUESTION).numel()
    lengths = [engine.chunk_ids(t).numel() for t in texts]
    # the default: a quarter of the chunk tokens, half of them chunk starts, half what the prompt reads
    assert body["recomputed_tokens"] == planned_recompute(lengths, BlendConfig()) == n_recompute(sum(lengths), 0.25)
    t = body["timings"]
    assert 0 < t["ttft_s"] <= t["total_s"] and t["tokens_per_s"] > 0


def test_blend_at_ratio_one_answers_like_full(client, texts):
    chunks = [{"text": t} for t in texts]
    full = client.post("/v1/generate", json={"prompt": QUESTION, "chunks": chunks, "max_tokens": 10, "mode": "full"})
    blend = client.post(
        "/v1/generate", json={"prompt": QUESTION, "chunks": chunks, "max_tokens": 10, "mode": "blend", "recompute_ratio": 1.0}
    )
    reuse = client.post("/v1/generate", json={"prompt": QUESTION, "chunks": chunks, "max_tokens": 10, "mode": "reuse"})
    assert full.status_code == blend.status_code == reuse.status_code == 200
    assert blend.json()["text"] == full.json()["text"]
    assert blend.json()["recomputed_tokens"] == full.json()["recomputed_tokens"] > 0
    assert reuse.json()["recomputed_tokens"] == 0


def test_text_chunks_are_stored_on_first_use(client, store, texts):
    r = client.post("/v1/generate", json={"prompt": QUESTION, "chunks": [{"text": texts[0]}], "max_tokens": 2})
    assert r.status_code == 200
    assert store.has(content_hash(texts[0]))
    both = {"text": texts[0], "content_hash": content_hash(texts[0])}
    assert client.post("/v1/generate", json={"prompt": QUESTION, "chunks": [both], "max_tokens": 2}).status_code == 200


def test_unknown_hash_is_404(client):
    r = client.post("/v1/generate", json={"prompt": QUESTION, "chunks": [{"content_hash": "ab" * 32}], "max_tokens": 4})
    _assert_error(r, 404, "chunk_not_found")


def test_over_long_prompt_is_400_and_stores_nothing(client, store, texts):
    r = client.post("/v1/generate", json={"prompt": "word " * 5000, "chunks": [{"text": texts[1]}], "max_tokens": 4})
    _assert_error(r, 400, "prompt_too_long")
    assert not store.has(content_hash(texts[1]))
    r = client.post("/v1/generate", json={"prompt": QUESTION, "max_tokens": 2048, "chunks": [{"text": "x " * 2100}]})
    _assert_error(r, 400, "chunk_too_long")


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": QUESTION, "mode": "turbo"},
        {"prompt": QUESTION, "chunks": [{}]},
        {"prompt": QUESTION, "chunks": [{"content_hash": "not-a-hash"}]},
        {"prompt": QUESTION, "chunks": [{"text": "a", "content_hash": "0" * 64}]},
        {"prompt": QUESTION, "recompute_ratio": 1.5},
        {"prompt": ""},
        {"prompt": QUESTION, "max_tokens": 0},
    ],
)
def test_malformed_requests_are_422(client, body):
    _assert_error(client.post("/v1/generate", json=body), 422, "validation_error")


def test_chunks_endpoint_validation(client):
    _assert_error(client.post("/v1/chunks", json={"texts": []}), 422, "validation_error")
    _assert_error(client.post("/v1/chunks", json={"texts": [""]}), 422, "validation_error")
    _assert_error(client.get("/v1/nothing-here"), 404, "not_found")


def test_unknown_cartridge_is_404_until_a_resolver_is_plugged(client):
    r = client.post("/v1/generate", json={"prompt": QUESTION, "cartridges": ["ctg-1"], "max_tokens": 2})
    _assert_error(r, 404, "cartridge_not_found")


def test_plugged_resolver_supplies_prefix_kv(engine, store):
    cache = engine.new_cache()
    engine.forward(engine.encode("The observatory is on Mount Fell."), cache, 0)
    known = {"ctg-fell": [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]}
    seen = []

    def resolve(ids):
        seen.append(list(ids))
        if any(i not in known for i in ids):
            raise CartridgeNotFound(next(i for i in ids if i not in known))
        return known[ids[0]]

    app = create_app(engine=engine, store=store, resolve_cartridges=resolve, key=KEY)
    with _client(app) as c:
        r = c.post(
            "/v1/generate",
            json={"prompt": "Where is the observatory?", "cartridges": ["ctg-fell"], "max_tokens": 6, "mode": "full"},
        )
        assert r.status_code == 200, r.text
        expected = engine.generate("Where is the observatory?", [], mode="full", prefix_kv=known["ctg-fell"], max_tokens=6)
        assert r.json()["text"] == expected.text
        _assert_error(c.post("/v1/generate", json={"prompt": "x", "cartridges": ["nope"]}), 404, "cartridge_not_found")
    assert seen == [["ctg-fell"], ["nope"]]


def test_default_resolver_serves_the_cartridges_the_service_trains(engine, store, tmp_path):
    """Without --cartridge-resolver the server reads <data dir>/cartridges/<id>/cartridge.safetensors,
    the layout train_cartridge writes, so a handoff's cartridge ids are servable as they are."""
    import uuid

    from app.inference.cartridge import Cartridge, compose, directory_resolver_factory
    from pipelines.cartridges.chat import context_ids

    ids = context_ids(engine.tokenizer, "The observatory is on Mount Fell. It opens at dusk.")
    mine, alien = str(uuid.uuid4()), str(uuid.uuid4())
    cart = Cartridge.from_tokens(engine.model, ids, 6, model_id=engine.model_id)
    cart.save(tmp_path / mine / "cartridge.safetensors")
    Cartridge.from_tokens(engine.model, ids, 6, model_id="another-model").save(tmp_path / alien / "cartridge.safetensors")
    app = create_app(engine=engine, store=store, cartridge_resolver_factory=directory_resolver_factory(tmp_path), key=KEY)
    with _client(app) as c:
        r = c.post(
            "/v1/generate", json={"prompt": "Where is the observatory?", "cartridges": [mine], "max_tokens": 5, "mode": "full"}
        )
        assert r.status_code == 200, r.text
        expected = engine.generate("Where is the observatory?", [], mode="full", prefix_kv=compose([cart]), max_tokens=5)
        assert r.json()["text"] == expected.text
        _assert_error(c.post("/v1/generate", json={"prompt": "x", "cartridges": [str(uuid.uuid4())]}), 404, "cartridge_not_found")
        _assert_error(c.post("/v1/generate", json={"prompt": "x", "cartridges": ["../" + mine]}), 404, "cartridge_not_found")
        _assert_error(c.post("/v1/generate", json={"prompt": "x", "cartridges": [alien]}), 409, "cartridge_incompatible")
        # Erasure (the service's call after a user's data is deleted): operator only; the loaded
        # copy and the files go; a path is never a cartridge id.
        _assert_error(c.delete(f"/v1/cartridges/{mine}", headers=_token(cartridges=[mine])), 403, "forbidden")
        outside = tmp_path.parent / f"{tmp_path.name}-keep.safetensors"
        outside.write_bytes(b"x")
        assert c.delete(f"/v1/cartridges/..%2F{outside.stem}").status_code == 404  # no such route
        assert c.app.state.resolve_cartridges.forget(f"../{outside.stem}") is False and outside.exists()
        assert c.delete(f"/v1/cartridges/{mine}").json() == {"deleted": True}
        assert not (tmp_path / mine).exists()
        _assert_error(c.post("/v1/generate", json={"prompt": "x", "cartridges": [mine]}), 404, "cartridge_not_found")
        assert c.delete(f"/v1/cartridges/{mine}").json() == {"deleted": False}  # idempotent
        outside.unlink()


# ---- authentication (issue 15: the tier trusted anyone who could reach it) -----------------------
def _token(chunks=(), cartridges=(), ttl_s=60, key=KEY, now=None) -> dict:
    from app.kit.runtime.signing import sign

    t = sign(key, org="o", sub="u", chunks=list(chunks), cartridges=list(cartridges), ttl_s=ttl_s, now=now)
    return {"Authorization": f"Bearer {t}"}


def test_every_call_but_healthz_needs_credentials(engine, store, texts):
    with TestClient(create_app(engine=engine, store=store, key=KEY), raise_server_exceptions=False) as anon:
        assert anon.get("/healthz").status_code == 200
        h = content_hash(texts[0])
        for r in (
            anon.post("/v1/generate", json={"prompt": "x", "chunks": [{"content_hash": h}], "max_tokens": 2}),
            anon.post("/v1/chunks", json={"texts": texts}),
            anon.delete(f"/v1/chunks/{h}"),
            anon.post("/v1/generate", json={"prompt": "x", "max_tokens": 2}, headers={"Authorization": "Bearer not-a-key"}),
        ):
            _assert_error(r, 401, "unauthorized")
        assert not store.has(h)


def test_a_handoff_token_serves_exactly_its_chunks(client, texts):
    hashes = client.post("/v1/chunks", json={"texts": texts}).json()["content_hashes"]
    mine, other = hashes[0], hashes[1]
    ok = client.post(
        "/v1/generate", json={"prompt": QUESTION, "chunks": [{"content_hash": mine}], "max_tokens": 2}, headers=_token([mine])
    )
    assert ok.status_code == 200, ok.text
    # Stored, but not in the grant: answered exactly like a hash nobody stored.
    not_mine = client.post(
        "/v1/generate", json={"prompt": "x", "chunks": [{"content_hash": other}], "max_tokens": 2}, headers=_token([mine])
    )
    absent_h = "f" * 64
    absent = client.post(
        "/v1/generate", json={"prompt": "x", "chunks": [{"content_hash": absent_h}], "max_tokens": 2}, headers=_token([mine])
    )
    _assert_error(not_mine, 404, "chunk_not_found")
    _assert_error(absent, 404, "chunk_not_found")
    assert not_mine.json()["error"]["message"].replace(other, "H") == absent.json()["error"]["message"].replace(absent_h, "H")
    # Raw texts, precompute and deletion are operator calls.
    _assert_error(
        client.post(
            "/v1/generate", json={"prompt": "x", "chunks": [{"text": texts[1]}], "max_tokens": 2}, headers=_token([mine])
        ),
        403,
        "forbidden",
    )
    _assert_error(client.post("/v1/chunks", json={"texts": ["new"]}, headers=_token([mine])), 403, "forbidden")
    _assert_error(client.delete(f"/v1/chunks/{mine}", headers=_token([mine])), 403, "forbidden")
    _assert_error(
        client.post("/v1/generate", json={"prompt": "x", "cartridges": ["c1"], "max_tokens": 2}, headers=_token([mine])),
        404,
        "cartridge_not_found",
    )


def test_forged_and_expired_tokens_are_refused(client, texts):
    import time

    h = client.post("/v1/chunks", json={"texts": texts[:1]}).json()["content_hashes"][0]
    body = {"prompt": "x", "chunks": [{"content_hash": h}], "max_tokens": 2}
    _assert_error(client.post("/v1/generate", json=body, headers=_token([h], key=b"another key")), 401, "unauthorized")
    _assert_error(client.post("/v1/generate", json=body, headers=_token([h], now=time.time() - 3600)), 401, "unauthorized")
    # Widening a real token's grant breaks its signature.
    import base64
    import json

    t = _token(["0" * 64])["Authorization"].split()[1]
    pre, grant, mac = t.split(".")
    g = json.loads(base64.urlsafe_b64decode(grant + "=" * (-len(grant) % 4)))
    g["chunks"].append(h)
    forged = base64.urlsafe_b64encode(json.dumps(g).encode()).rstrip(b"=").decode()
    _assert_error(
        client.post("/v1/generate", json=body, headers={"Authorization": f"Bearer {pre}.{forged}.{mac}"}), 401, "unauthorized"
    )


def test_body_limit_before_tokenising(engine, store):
    from app.inference.server import ServerConfig  # noqa: F401  (max_body_bytes lives there)

    with _client(create_app(engine=engine, store=store, key=KEY)) as c:
        r = c.post("/v1/generate", json={"prompt": "x" * (5 * 2**20), "max_tokens": 2})
        _assert_error(r, 413, "payload_too_large")
        r = c.post("/v1/generate", json={"prompt": "x" * 300_000, "max_tokens": 2})
        _assert_error(r, 422, "validation_error")
