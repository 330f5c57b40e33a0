"""The reads behind the console's asset item page, the knowledge tree as of an instant and the jobs
page's start control: GET /v1/knowledge/assets/{id} (404 for an asset the caller may not see,
exactly as for an absent one), GET /v1/knowledge/tree?as_of=, GET /v1/jobs/kinds; two users of one
org and a user of another org, on assets that a real bootstrap wrote (chunks and tree nodes)."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from tests.test_console_assets import asset


def _docs(tmp_path, name: str) -> str:
    d = tmp_path / name
    d.mkdir()
    (d / f"{name}.md").write_text(f"# {name}\n\nIntro.\n\n## Refunds\n\nRefunds above 500 EUR need a second approver.\n")
    return str(d)


def _asset_of(admin_engine, org_id, path: str):
    with admin_engine.connect() as c:
        return c.execute(
            text("SELECT id, created_at FROM knowledge_assets WHERE org_id = :o AND source_uri LIKE :p"),
            {"o": org_id, "p": f"%{path}%"},
        ).one()


def _chunks(admin_engine, org_id, asset_id) -> int:
    with admin_engine.connect() as c:
        return c.execute(
            text("SELECT count(*) FROM chunks WHERE org_id = :o AND asset_id = :a"), {"o": org_id, "a": asset_id}
        ).scalar_one()


def test_asset_item_is_a_404_for_whoever_may_not_see_it(run_job, world, client, tmp_path, admin_engine):
    org, other = world.org(), world.org()
    owner = world.user(org, roles=["steward"])  # the first steward owns operator jobs' private output
    member = world.user(org)
    eve = world.user(other, roles=["admin"])
    assert run_job(owner.org_id, "bootstrap", {"path": _docs(tmp_path, "secret"), "visibility": "private"}).status == "succeeded"
    assert run_job(owner.org_id, "bootstrap", {"path": _docs(tmp_path, "shared"), "visibility": "org"}).status == "succeeded"
    secret, shared = _asset_of(admin_engine, owner.org_id, "secret").id, _asset_of(admin_engine, owner.org_id, "shared").id

    got = client.get(f"/v1/knowledge/assets/{secret}", headers=owner.h)
    assert got.status_code == 200, got.text
    listed = next(a for a in client.get("/v1/knowledge/assets", headers=owner.h).json()["items"] if a["id"] == str(secret))
    body = got.json()
    assert {k: v for k, v in body.items() if k != "chunks"} == listed  # the list's item shape, field for field
    assert body["chunks"] == _chunks(admin_engine, owner.org_id, secret) > 0 and body["status"] == "active"
    assert body["visibility"] == "private" and body["kind"] == "document"
    # The member of the same org and the admin of another: the private asset does not exist for them.
    absent = client.get(f"/v1/knowledge/assets/{uuid.uuid4()}", headers=member.h)
    assert absent.status_code == 404
    for who in (member, eve):
        r = client.get(f"/v1/knowledge/assets/{secret}", headers=who.h)
        assert r.status_code == 404 and r.json()["error"] == absent.json()["error"], r.text
    assert client.get(f"/v1/knowledge/assets/{shared}", headers=member.h).json()["chunks"] == _chunks(
        admin_engine, owner.org_id, shared
    )
    assert client.get(f"/v1/knowledge/assets/{shared}", headers=eve.h).status_code == 404
    # Reading it is recorded as a read of its content.
    seen = client.get("/v1/retrievals", params={"item_id": str(shared)}, headers=member.h).json()["retrievals"]
    assert "get" in {r["kind"] for r in seen}
    # A dropped asset is still readable by who may see it, with its status; as of before it existed, a 404.
    dropped = asset(admin_engine, member, status="dropped", at="2026-02-01T00:00:00+00:00")
    assert client.get(f"/v1/knowledge/assets/{dropped}", headers=member.h).json()["status"] == "dropped"
    assert client.get(f"/v1/knowledge/assets/{dropped}", headers=owner.h).status_code == 404
    assert (
        client.get(f"/v1/knowledge/assets/{dropped}", params={"as_of": "2026-01-01T00:00:00Z"}, headers=member.h).status_code
        == 404
    )
    assert (
        client.get(f"/v1/knowledge/assets/{dropped}", params={"as_of": "2026-03-01T00:00:00Z"}, headers=member.h).status_code
        == 200
    )
    assert client.get("/v1/knowledge/assets/not-a-uuid", headers=member.h).status_code == 422
    assert client.get(f"/v1/knowledge/assets/{shared}").status_code == 401


def test_the_knowledge_tree_as_of_holds_the_nodes_that_existed_then(run_job, world, client, tmp_path, admin_engine):
    org, other = world.org(), world.org()
    owner, member = world.user(org, roles=["steward"]), world.user(org)
    eve = world.user(other, roles=["admin"])
    assert run_job(owner.org_id, "bootstrap", {"path": _docs(tmp_path, "first"), "visibility": "org"}).status == "succeeded"
    then = _asset_of(admin_engine, owner.org_id, "first").created_at.isoformat()
    assert run_job(owner.org_id, "bootstrap", {"path": _docs(tmp_path, "later"), "visibility": "org"}).status == "succeeded"

    def paths(who, path="docs", **params):
        r = client.get("/v1/knowledge/tree", params={"path": path, **params}, headers=who.h)
        return r.status_code, {c["path"] for c in r.json().get("children", [])}

    for who in (owner, member):
        assert paths(who) == (200, {"docs/first.md", "docs/later.md"})
        assert paths(who, as_of=then) == (200, {"docs/first.md"})
        assert paths(who, path="docs/later.md", as_of=then)[0] == 404  # a node written later did not exist then
        assert paths(who, path="", as_of="2020-01-01T00:00:00Z") == (200, set())
    assert paths(eve)[0] == 404 and paths(eve, as_of=then)[0] == 404
    assert client.get("/v1/knowledge/tree", params={"as_of": "not a time"}, headers=member.h).status_code == 422


def test_a_rewritten_asset_keeps_its_nodes_in_the_tree_as_of_before(run_job, world, client, tmp_path, admin_engine):
    """Re-enriching a changed document rebuilds its nodes; those that were there before keep their
    creation time, so the tree as of an instant between the two runs still shows them (and not the
    section added later)."""
    org = world.org()
    owner = world.user(org, roles=["steward"])
    folder = _docs(tmp_path, "policy")
    assert run_job(owner.org_id, "bootstrap", {"path": folder, "visibility": "org"}).status == "succeeded"
    with admin_engine.connect() as c:
        then = c.execute(text("SELECT max(created_at) FROM knowledge_nodes WHERE org_id = :o"), {"o": owner.org_id}).scalar_one()
    doc = tmp_path / "policy" / "policy.md"
    doc.write_text(doc.read_text() + "\n## Travel\n\nTrains over planes below 600 km.\n")
    assert run_job(owner.org_id, "bootstrap", {"path": folder, "visibility": "org"}).status == "succeeded"

    def sections(**params):
        r = client.get("/v1/knowledge/tree", params={"path": "docs/policy.md", **params}, headers=owner.h)
        assert r.status_code == 200, r.text
        return {c["name"] for c in r.json()["children"]}

    now = sections()
    assert any("Travel" in n for n in now) and any("Refunds" in n for n in now), now
    before = sections(as_of=then.isoformat())
    assert any("Refunds" in n for n in before) and not any("Travel" in n for n in before), before


def test_job_kinds_say_which_kinds_the_caller_may_start(client, world):
    org = world.org()
    member, steward, admin = world.user(org), world.user(org, roles=["steward"]), world.user(org, roles=["admin"])
    kinds = client.get("/openapi.json").json()["components"]["schemas"]["JobIn"]["properties"]["kind"]["enum"]

    def may(who):
        r = client.get("/v1/jobs/kinds", headers=who.h)
        assert r.status_code == 200, r.text
        assert [k["name"] for k in r.json()["kinds"]] == kinds
        return {k["name"] for k in r.json()["kinds"] if k["may_start"]}

    assert may(member) == set()
    assert may(steward) == set(kinds) - {"reembed"}
    assert may(admin) == set(kinds)
    # What it says is what POST /v1/jobs does: the member and the steward are refused, not the admin.
    assert client.post("/v1/jobs", json={"kind": "distill"}, headers=member.h).status_code == 403
    r = client.post("/v1/jobs", json={"kind": "reembed", "params": {"model": "local/e5-small"}}, headers=steward.h)
    assert r.status_code == 403 and "admins" in r.json()["error"]["message"]
    assert client.get("/v1/jobs/kinds").status_code == 401
