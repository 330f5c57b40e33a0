"""train_cartridge job plumbing: derived scope, trained_on lineage, staleness, and which callers
get a cartridge in the /v1/context handoff. The training itself (self-study + distillation with
the real model) is tested in tests/cartridges/; here it is replaced by a recorder so the test
stays fast — the plumbing around it is what is under test."""

from __future__ import annotations

import pytest


@pytest.fixture
def fake_training(monkeypatch, tmp_path):
    calls = []

    def train(texts, hashes, out_dir, p, steps, **kw):
        calls.append({"texts": texts, "hashes": hashes, "p": p, "steps": steps})
        path = tmp_path / f"c{len(calls)}.safetensors"
        path.write_bytes(b"not a real cartridge")
        return path, {"model_id": "smollm2-135m-instruct", "p": p, "probe_loss_after": 1.0}

    import pipelines.cartridges.trainer as trainer

    monkeypatch.setattr(trainer, "train_cartridge", train)
    return calls


def _docs(tmp_path, name, text):
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
    assert (
        run_job(steward.org_id, "bootstrap", {"path": str(folder), "visibility": "org", "labels": ["m&a"]}).status == "succeeded"
    )
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
    assert (
        run_job(steward.org_id, "bootstrap", {"path": str(folder), "visibility": "org", "labels": ["m&a"]}).status == "succeeded"
    )
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
        c.execute(
            sql("UPDATE knowledge_assets SET owner_id = :b WHERE org_id = :o AND source_uri = 'doc:b.md'"),
            {"b": bob.user_id, "o": alice.org_id},
        )
    job = run_job(alice.org_id, "train_cartridge", {})
    assert job.status == "failed" and "different owners" in job.error and fake_training == []


def _train_into_folder(monkeypatch, during=None):
    import pipelines.cartridges.trainer as trainer

    def train(texts, hashes, out_dir, p, steps, **kw):
        (out_dir / "selfstudy").mkdir(parents=True, exist_ok=True)
        (out_dir / "selfstudy" / "shard-0.jsonl").write_text(texts[0])  # the corpus, readable, as self-study keeps it
        if during is not None:
            during()
        path = out_dir / "cartridge.safetensors"
        path.write_bytes(b"kv")
        return path, {"model_id": "smollm2-135m-instruct", "p": p}

    monkeypatch.setattr(trainer, "train_cartridge", train)


def test_assets_erased_while_a_cartridge_trains_leave_nothing(client, world, run_job, tmp_path, here, monkeypatch, swap_state):
    org = world.org()
    alice = world.user(org, roles=["steward"])  # the only steward: an operator run's assets are hers
    folder = _docs(tmp_path, "mine", "Alice's salary review is on Friday.")
    assert (
        run_job(alice.org_id, "bootstrap", {"path": str(folder), "visibility": "private"}, with_settings=here).status
        == "succeeded"
    )
    admin = world.user(org, roles=["admin"])
    swap_state(client.app.state, "settings", here)
    erase = lambda: client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h)  # noqa: E731
    _train_into_folder(monkeypatch, during=lambda: erase().raise_for_status())
    job = run_job(alice.org_id, "train_cartridge", {}, with_settings=here)
    assert job.status == "failed" and "erased while it trained" in job.error
    assert not (here.data_dir / "cartridges" / str(job.id)).exists()
    from sqlalchemy import text as sql

    with world.engine.begin() as c:
        assert c.execute(sql("SELECT count(*) FROM cartridges WHERE org_id = :o"), {"o": alice.org_id}).scalar() == 0


def test_erased_cartridge_folders_left_by_a_stopped_process_are_swept(
    client, world, run_job, tmp_path, here, monkeypatch, swap_state
):
    from app.erasure import service as forget

    org = world.org()
    alice = world.user(org, roles=["steward"])
    folder = _docs(tmp_path, "mine", "Alice's medical leave starts in May.")
    assert (
        run_job(alice.org_id, "bootstrap", {"path": str(folder), "visibility": "private"}, with_settings=here).status
        == "succeeded"
    )
    _train_into_folder(monkeypatch)
    job = run_job(alice.org_id, "train_cartridge", {}, with_settings=here)
    assert job.status == "succeeded", job.error
    out = here.data_dir / "cartridges" / str(job.id)
    # The erasure commits; its process stops before the step after the commit removes the files.
    swap_state(client.app.state, "settings", here)
    monkeypatch.setattr(forget, "drop_derived_state", lambda *a, **kw: None)
    assert client.delete(f"/v1/users/{alice.user_id}/data", headers=alice.h).status_code == 202
    assert out.exists()
    swept = run_job(alice.org_id, "retention", with_settings=here)
    assert swept.status == "succeeded" and swept.stats["cartridge_folders_removed"] == 1
    assert not out.exists()
