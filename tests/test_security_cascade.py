"""Issue 41 M5 reproductions: memories derived from a memory, a chunk or an asset outlive it.

The deletion cascade must follow every source type as it follows episodes (remove, or quarantine
for re-derivation), transitively (M0 -> M1 -> M2), through every deletion path (DELETE of a
memory or an episode, the right to be forgotten, retention, knowledge re-ingest, branch writes),
reaching rows the deleter cannot see, and telling the deleter nothing about them."""

from __future__ import annotations

from sqlalchemy import text

from tests.helpers import ep


def _status(admin_engine, memory_id) -> str | None:
    with admin_engine.connect() as c:
        return c.execute(text("SELECT status FROM memories WHERE id = :i"), {"i": memory_id}).scalar()


def _mem(client, actor, text_: str, sources=(), headers=None, **scope) -> str:
    r = client.post(
        "/v1/memories",
        json={"text": text_, "kind": "fact", **scope, "sources": [{"type": t, "id": i} for t, i in sources]},
        headers=headers or actor.h,
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _episode(client, actor, content: str, **kw) -> str:
    r = client.post("/v1/episodes", json=ep(content, **kw), headers=actor.h)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _audit(admin_engine, action: str, org_id) -> list[dict]:
    with admin_engine.connect() as c:
        return list(
            c.execute(
                text("SELECT details FROM audit_log WHERE org_id = :o AND action = :a ORDER BY seq"), {"o": org_id, "a": action}
            ).scalars()
        )


def _searchable(client, actor, query: str) -> set[str]:
    return {h["id"] for h in client.post("/v1/search", json={"query": query, "k": 50}, headers=actor.h).json()["results"]}


def test_deleting_a_memory_reaches_what_was_derived_from_it_transitively(client, world, admin_engine):
    org = world.org()
    alice, bob, carol = world.user(org), world.user(org), world.user(org)
    m0 = _mem(client, alice, "the VPN gateway moved to vpn2.example.com", visibility="org")
    m1 = _mem(client, bob, "use vpn2 for the VPN gateway", [("memory", m0)])  # private to bob
    m2 = _mem(client, bob, "VPN gateway: vpn2, always", [("memory", m1)])
    own = _episode(client, carol, "carol sets up her VPN client")
    m3 = _mem(client, carol, "carol's VPN client uses the vpn2 gateway", [("memory", m0), ("episode", own)])
    assert client.get(f"/v1/memories/{m1}", headers=alice.h).status_code == 404  # alice cannot see them
    r = client.delete(f"/v1/memories/{m0}", headers=alice.h)
    assert r.status_code == 204 and r.content == b""
    # Derived only from m0 (m2 through m1): removed, content included, though alice could not see them.
    assert _status(admin_engine, m1) is None and _status(admin_engine, m2) is None
    for m in (m1, m2):
        assert client.get(f"/v1/memories/{m}", headers=bob.h).status_code == 404
    # With a source left: quarantined until re-derived, and never served.
    assert _status(admin_engine, m3) == "quarantined"
    assert m3 not in _searchable(client, carol, "VPN gateway vpn2")
    (cascade,) = _audit(admin_engine, "memory.cascade", alice.org_id)
    assert set(cascade["removed_memory_ids"]) == {m1, m2} and cascade["quarantined_memory_ids"] == [m3]
    assert "vpn" not in str(cascade).lower()


def test_deleting_an_episode_reaches_memories_derived_from_its_memories(client, world, admin_engine):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    e = _episode(client, alice, "the invoice run moved to Thursdays", visibility="org")
    m1 = _mem(client, bob, "invoices run on Thursdays", [("episode", e)])
    m2 = _mem(client, bob, "prepare invoices on Wednesday", [("memory", m1)])
    other = _episode(client, bob, "bob's own invoice checklist")
    m3 = _mem(client, bob, "invoice checklist for Thursdays", [("memory", m1), ("episode", other)])
    r = client.delete(f"/v1/episodes/{e}", headers=alice.h)
    assert r.status_code == 202
    assert _status(admin_engine, m1) is None and _status(admin_engine, m2) is None
    assert _status(admin_engine, m3) == "quarantined"
    assert not {m1, m2, m3} & _searchable(client, bob, "invoices Thursdays Wednesday checklist")
    (details,) = _audit(admin_engine, "episode.delete", alice.org_id)
    assert set(details["removed_memory_ids"]) == {m1, m2} and details["quarantined_memory_ids"] == [m3]
    # alice could see none of bob's private memories: her job says nothing of them.
    job = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=alice.h).json()
    assert (job["stats"]["memories_removed"], job["stats"]["memories_quarantined"]) == (0, 0), job


def test_a_deleters_answer_counts_only_what_it_may_see(client, world, admin_engine):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    e = _episode(client, alice, "the refund limit is 500 euros", visibility="org")
    mine = _mem(client, alice, "refunds up to 500 euros", [("episode", e)], visibility="org")
    bobs = _mem(client, bob, "refund limit 500", [("memory", mine)])
    r = client.delete(f"/v1/episodes/{e}", headers=alice.h)
    stats = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=alice.h).json()["stats"]
    assert (stats["memories_removed"], stats["memories_quarantined"]) == (1, 0), stats  # hers, not bob's
    assert _status(admin_engine, mine) is None and _status(admin_engine, bobs) is None
    (details,) = _audit(admin_engine, "episode.delete", alice.org_id)
    assert details["memories_removed"] == 2 and set(details["removed_memory_ids"]) == {mine, bobs}


def test_forgetting_a_user_reaches_memories_derived_from_their_memories(client, world, admin_engine):
    org = world.org()
    alice, bob, carol, admin = world.user(org), world.user(org), world.user(org), world.user(org, roles=["admin"])
    m0 = _mem(client, alice, "alice's salary review is in March", visibility="org")
    e = _episode(client, alice, "alice mentioned the March salary review", visibility="org")
    m1 = _mem(client, bob, "salary reviews happen in March", [("memory", m0)])
    m2 = _mem(client, bob, "the review cycle is in March", [("episode", e)])
    m3 = _mem(client, bob, "prepare review notes in February", [("memory", m2)])
    own = _episode(client, carol, "carol's review is in June")
    m4 = _mem(client, carol, "reviews: March for alice, June for carol", [("memory", m0), ("episode", own)])
    r = client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h)
    assert r.status_code == 202
    for m in (m0, m1, m2, m3):
        assert _status(admin_engine, m) is None, m
    assert _status(admin_engine, m4) == "quarantined"
    assert not {m1, m2, m3, m4} & _searchable(client, bob, "salary review March February")
    (forget,) = _audit(admin_engine, "user.forget", alice.org_id)
    assert {m0, m1} <= set(forget["removed_memory_ids"]) and forget["quarantined_memory_ids"] == [m4]
    # The admin reads the audit log anyway: its job counts every memory reached.
    stats = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=admin.h).json()["stats"]
    assert (stats["memories_removed"], stats["memories_quarantined"]) == (4, 1), stats


def test_a_member_erasing_herself_learns_nothing_of_what_others_derived(client, world, admin_engine):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    m0 = _mem(client, alice, "the merger codename is Osprey", visibility="org")
    m1 = _mem(client, bob, "Osprey is the merger", [("memory", m0)])
    r = client.delete(f"/v1/users/{alice.user_id}/data", headers=alice.h)
    assert r.status_code == 202
    assert _status(admin_engine, m0) is None and _status(admin_engine, m1) is None
    with admin_engine.connect() as c:
        stats = c.execute(text("SELECT stats FROM jobs WHERE id = :i"), {"i": r.json()["job_id"]}).scalar_one()
    assert stats["memories_removed"] == 1, stats  # her own memory; bob's private one is not counted


def test_retention_reaches_memories_derived_from_derived_memories(client, world, admin_engine, run_job):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    old = _episode(client, alice, "the 2020 deploy freeze was in December", visibility="org", occurred_at="2020-01-01T00:00:00Z")
    m1 = _mem(client, bob, "deploys freeze in December", [("episode", old)])
    m2 = _mem(client, bob, "plan releases before December", [("memory", m1)])
    with admin_engine.begin() as c:
        c.execute(
            text("""UPDATE orgs SET settings = jsonb_set(coalesce(settings, '{}'::jsonb), '{retention}',
                          '{"episode": 365}') WHERE id = :o"""),
            {"o": alice.org_id},
        )
    job = run_job(alice.org_id, "retention")
    assert job.status == "succeeded" and job.stats["episodes_removed"] == 1
    assert _status(admin_engine, m1) is None and _status(admin_engine, m2) is None


def _bootstrap_doc(run_job, tmp_path, steward, body: str) -> None:
    d = tmp_path / "docs"
    d.mkdir(exist_ok=True)
    (d / "handbook.md").write_text(body)
    job = run_job(steward.org_id, "bootstrap", {"path": str(d), "visibility": "org"})  # the org's first steward owns it
    assert job.status == "succeeded", job.error


def _knowledge(admin_engine, org_id) -> tuple[str, list[str]]:
    with admin_engine.connect() as c:
        asset = c.execute(text("SELECT id FROM knowledge_assets WHERE org_id = :o"), {"o": org_id}).scalar_one()
        chunks = c.execute(text("SELECT id FROM chunks WHERE asset_id = :a ORDER BY ord"), {"a": asset}).scalars().all()
    return str(asset), [str(c) for c in chunks]


def test_forgetting_an_assets_owner_reaches_memories_derived_from_its_asset_and_chunks(
    client, world, admin_engine, run_job, tmp_path
):
    org = world.org()
    alice, bob = world.user(org, roles=["steward"]), world.user(org)
    _bootstrap_doc(run_job, tmp_path, alice, "The expense policy: taxis are refunded after 10pm only.")
    admin = world.user(org, roles=["admin"])
    asset, chunks = _knowledge(admin_engine, alice.org_id)
    from_asset = _mem(client, bob, "the handbook has an expense policy", [("asset", asset)])
    from_chunk = _mem(client, bob, "late taxis are refunded", [("chunk", chunks[0])])
    further = _mem(client, bob, "take a taxi after 10pm", [("memory", from_chunk)])
    own = _episode(client, bob, "bob took a taxi at 11pm")
    mixed = _mem(client, bob, "bob's 11pm taxi is refundable", [("chunk", chunks[0]), ("episode", own)])
    r = client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h)
    assert r.status_code == 202
    for m in (from_asset, from_chunk, further):
        assert _status(admin_engine, m) is None, m
    assert _status(admin_engine, mixed) == "quarantined"
    (forget,) = _audit(admin_engine, "user.forget", alice.org_id)
    assert {from_asset, from_chunk, further} <= set(forget["removed_memory_ids"])


def test_reingesting_a_changed_document_reaches_memories_derived_from_its_old_chunks(
    client, world, admin_engine, run_job, tmp_path
):
    org = world.org()
    alice, bob = world.user(org, roles=["steward"]), world.user(org)
    _bootstrap_doc(run_job, tmp_path, alice, "Badge office hours: 9 to 5 on weekdays.")
    asset, chunks = _knowledge(admin_engine, alice.org_id)
    m = _mem(client, bob, "the badge office opens at 9", [("chunk", chunks[0])])
    kept = _mem(client, bob, "there is a badge office", [("asset", asset)])
    _bootstrap_doc(run_job, tmp_path, alice, "Badge office hours: 10 to 4 on weekdays.")
    assert _knowledge(admin_engine, alice.org_id)[0] == asset  # the asset stays; its chunks were replaced
    assert _status(admin_engine, m) is None
    assert _status(admin_engine, kept) == "active"


def test_a_deletion_in_main_reaches_memories_derived_in_a_branch(client, world, admin_engine):
    org = world.org()
    alice, bob, steward = world.user(org), world.user(org), world.user(org, roles=["steward"])
    m0 = _mem(client, alice, "the on-call rota changes weekly", visibility="org")
    assert client.post("/v1/branches", json={"name": "plan"}, headers=steward.h).status_code == 201
    in_branch = {**bob.h, "Memscale-Branch": "plan"}
    m1 = _mem(client, bob, "on-call: weekly rota", [("memory", m0)], headers=in_branch)
    assert client.get(f"/v1/memories/{m1}", headers=in_branch).status_code == 200
    assert client.delete(f"/v1/memories/{m0}", headers=alice.h).status_code == 204
    assert _status(admin_engine, m1) is None
    assert client.get(f"/v1/memories/{m1}", headers=in_branch).status_code == 404


def test_a_deletion_in_a_branch_hides_what_was_derived_there_and_leaves_main(client, world, admin_engine):
    org = world.org()
    alice, bob, steward = world.user(org), world.user(org), world.user(org, roles=["steward"])
    m0 = _mem(client, alice, "the staging database is db-stage-3", visibility="org")
    m1 = _mem(client, bob, "staging runs on db-stage-3", [("memory", m0)])
    assert client.post("/v1/branches", json={"name": "cleanup"}, headers=steward.h).status_code == 201
    assert client.delete(f"/v1/memories/{m0}", headers={**alice.h, "Memscale-Branch": "cleanup"}).status_code == 204
    assert client.get(f"/v1/memories/{m1}", headers={**bob.h, "Memscale-Branch": "cleanup"}).status_code == 404
    assert client.get(f"/v1/memories/{m1}", headers=bob.h).json()["status"] == "active"  # main is untouched
    assert _status(admin_engine, m0) == "active" and _status(admin_engine, m1) == "active"
