"""train_cartridge job plumbing: derived scope, trained_on lineage, staleness, and which callers
get a cartridge in the /v1/context handoff. The training itself (self-study + distillation with
the real model) is tested in tests/cartridges/; here it is replaced by a recorder so the test
stays fast — the plumbing around it is what is under test."""

from __future__ import annotations

import pytest


@pytest.fixture
def fake_training(monkeypatch, tmp_path):
    calls = []

    def train(texts, hashes, out_dir, p, steps, **kw):  # noqa: ANN001, ANN003
        calls.append({"texts": texts, "hashes": hashes, "p": p, "steps": steps})
        path = tmp_path / f"c{len(calls)}.safetensors"
        path.write_bytes(b"not a real cartridge")
        return path, {"model_id": "smollm2-135m-instruct", "p": p, "probe_loss_after": 1.0}

    import pipelines.cartridges.trainer as trainer

    monkeypatch.setattr(trainer, "train_cartridge", train)
    return calls


def _docs(tmp_path, name, text):  # noqa: ANN001
    d = tmp_path / name
    d.mkdir()
    (d / "doc.md").write_text(text)
    return d


def test_cartridge_scope_lineage_staleness_and_handoff(client, world, run_job, tmp_path, fake_training):
    org = world.org()
    steward = world.user(org, roles=["steward"], clearances=["m&a"])
    member = world.user(org)
    cleared = world.user(org, clearances=["m&a"])
    folder = _docs(tmp_path, "deal", "The merger with Initech closes in March. The price is 40 million.")
    assert run_job(steward.org_id, "bootstrap", {"path": str(folder), "visibility": "org", "labels": ["m&a"]}).status == "succeeded"
    job = run_job(steward.org_id, "train_cartridge", {"p": 16, "steps": 2})
    assert job.status == "succeeded", job.error
    assert fake_training[0]["p"] == 16 and "Initech" in fake_training[0]["texts"][0]
    # Handed out only to callers who may read every asset it was trained on.
    ctx = lambda a: client.post("/v1/context", json={"query": "merger", "budget_tokens": 300}, headers=a.h).json()  # noqa: E731
    assert [c["id"] for c in ctx(cleared)["handoff"]["cartridges"]] == [str(job.id)]
    assert ctx(member)["handoff"]["cartridges"] == []
    lin = client.get(f"/v1/lineage/cartridge/{job.id}?direction=up", headers=cleared.h).json()
    assert [e["relation"] for e in lin["edges"]] == ["trained_on"]
    # A changed asset makes the cartridge stale: no longer handed out.
    (folder / "doc.md").write_text("The merger with Initech was called off.")
    assert run_job(steward.org_id, "bootstrap", {"path": str(folder), "visibility": "org", "labels": ["m&a"]}).status == "succeeded"
    assert ctx(cleared)["handoff"]["cartridges"] == []


def test_cartridge_over_two_owners_private_assets_fails_cleanly(client, world, run_job, tmp_path, fake_training):
    from sqlalchemy import text as sql

    org = world.org()
    alice, bob = world.user(org, roles=["steward"]), world.user(org)
    d = tmp_path / "two"
    d.mkdir()
    (d / "a.md").write_text("alice notes")
    (d / "b.md").write_text("bob notes")
    assert run_job(alice.org_id, "bootstrap", {"path": str(d), "visibility": "private"}).status == "succeeded"
    with world.engine.begin() as c:  # the second document belongs to bob (private to him)
        c.execute(sql("UPDATE knowledge_assets SET owner_id = :b WHERE org_id = :o AND source_uri = 'doc:b.md'"),
                  {"b": bob.user_id, "o": alice.org_id})
    job = run_job(alice.org_id, "train_cartridge", {})
    assert job.status == "failed" and "different owners" in job.error and fake_training == []
