"""Branches and as-of reads of an org's memory (issue 18), through the API, on the real database."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from tests.helpers import count, ep

TOKEN = "zebracrossing"  # every memory of these tests holds it, so a text search lists them all


def _mem(client, who, words: str, *, branch: str | None = None, **kw) -> dict:
    r = client.post("/v1/memories", json={"text": f"{TOKEN} {words}", "kind": "fact", **kw}, headers=_h(who, branch))
    assert r.status_code == 201, r.text
    return r.json()


def _h(who, branch: str | None = None) -> dict:
    return {**who.h, **({"Memscale-Branch": branch} if branch else {})}


def _texts(client, who, *, branch: str | None = None, as_of: str | None = None) -> set[str]:
    body = {"query": TOKEN, "types": ["memory"], "mode": "text", "k": 100, **({"as_of": as_of} if as_of else {})}
    r = client.post("/v1/search", json=body, headers=_h(who, branch))
    assert r.status_code == 200, r.text
    return {x["text"].removeprefix(f"{TOKEN} ") for x in r.json()["results"]}


def _now() -> str:
    time.sleep(0.01)  # instants on either side of a write differ
    t = datetime.now(UTC).isoformat()
    time.sleep(0.01)
    return t


def _branch(client, who, name: str, **kw) -> dict:
    r = client.post("/v1/branches", json={"name": name, **kw}, headers=who.h)
    assert r.status_code == 201, r.text
    return r.json()


def test_as_of_reads_the_state_recorded_then(client, world):
    org = world.org()
    alice = world.user(org)
    m1 = _mem(client, alice, "deploys on tuesday")
    before_patch = _now()
    r = client.patch(f"/v1/memories/{m1['id']}", json={"text": f"{TOKEN} deploys on thursday"}, headers=alice.h)
    assert r.status_code == 200
    v2 = r.json()
    _mem(client, alice, "cache is warm")
    assert _texts(client, alice) == {"deploys on thursday", "cache is warm"}
    assert _texts(client, alice, as_of=before_patch) == {"deploys on tuesday"}
    # GET by id: the version did not exist yet at that instant; the old one did.
    assert client.get(f"/v1/memories/{v2['id']}", params={"as_of": before_patch}, headers=alice.h).status_code == 404
    then = client.get(f"/v1/memories/{m1['id']}", params={"as_of": before_patch}, headers=alice.h)
    assert then.status_code == 200  # and shown as it was then: the current version, still valid
    assert (then.json()["status"], then.json()["superseded_at"], then.json()["valid_to"]) == ("active", None, None)
    now = client.get(f"/v1/memories/{m1['id']}", headers=alice.h).json()
    assert now["status"] == "superseded" and now["superseded_at"] is not None
    # Context as of then serves the old text (with a session too: its own state is today's).
    ctx = client.post("/v1/context", json={"query": f"{TOKEN} deploys", "as_of": before_patch}, headers=alice.h).json()
    assert "tuesday" in ctx["text"] and "thursday" not in ctx["text"]
    sid = client.post("/v1/sessions", json={"working_context": {"task": "plan the release"}}, headers=alice.h).json()["id"]
    ctx = client.post(
        "/v1/context", json={"query": f"{TOKEN} deploys", "as_of": before_patch, "session_id": sid}, headers=alice.h
    ).json()
    assert "tuesday" in ctx["text"] and "thursday" not in ctx["text"] and "plan the release" in ctx["text"]
    assert client.post("/v1/search", json={"query": "x", "as_of": 0}, headers=alice.h).status_code == 422
    assert (
        client.get(f"/v1/memories/{m1['id']}", params={"as_of": "2026-01-01T00:00:00"}, headers=alice.h).status_code == 422
    )  # an instant needs its offset
    # Lineage as of before the patch has no `supersedes` edge yet.
    g = client.get(f"/v1/lineage/memory/{m1['id']}", params={"as_of": before_patch}, headers=alice.h).json()
    assert not g["edges"]
    assert client.get(f"/v1/lineage/memory/{m1['id']}", headers=alice.h).json()["edges"]


def test_deletion_wins_over_history(client, world):
    org = world.org()
    alice = world.user(org)
    m = _mem(client, alice, "secret plan")
    then = _now()
    assert client.delete(f"/v1/memories/{m['id']}", headers=alice.h).status_code == 204
    assert _texts(client, alice, as_of=then) == set()


def test_branch_isolation_both_ways(client, world, admin_engine):
    org = world.org()
    steward = world.user(org, roles=("steward",))
    m_keep = _mem(client, steward, "keep me", visibility="org")
    m_edit = _mem(client, steward, "old wording", visibility="org")
    m_gone = _mem(client, steward, "delete me in the branch", visibility="org")
    b = _branch(client, steward, "trial")
    assert b["name"] == "trial" and b["from"] == "main"
    # Writes in the branch: a new memory, a new version of a main memory, a deletion.
    _mem(client, steward, "branch only", branch="trial", visibility="org")
    r = client.patch(f"/v1/memories/{m_edit['id']}", json={"text": f"{TOKEN} new wording"}, headers=_h(steward, "trial"))
    assert r.status_code == 200, r.text
    assert client.delete(f"/v1/memories/{m_gone['id']}", headers=_h(steward, "trial")).status_code == 204
    # Main's write after the fork.
    _mem(client, steward, "main after fork", visibility="org")
    assert _texts(client, steward, branch="trial") == {"keep me", "new wording", "branch only"}
    assert _texts(client, steward) == {"keep me", "old wording", "delete me in the branch", "main after fork"}
    # Main's rows were not touched by the branch: versions and statuses as before.
    assert client.get(f"/v1/memories/{m_edit['id']}", headers=steward.h).json()["status"] == "active"
    assert client.get(f"/v1/memories/{m_gone['id']}", headers=steward.h).status_code == 200
    # Row-level security refuses a branch transaction's change to a main row, whatever the code does.
    with admin_engine.connect() as c:
        c.execute(text("SET ROLE memscale_app"))
        c.execute(
            text(
                "SELECT set_config('memscale.org_id', :o, false), set_config('memscale.scope', 'all', false),"
                " set_config('memscale.branch', :b, false), set_config('memscale.branches', :bs, false)"
            ),
            {"o": str(steward.org_id), "b": b["id"], "bs": f'["{b["id"]}"]'},
        )
        assert c.execute(text("DELETE FROM memories WHERE id = :i"), {"i": m_keep["id"]}).rowcount == 0
        with pytest.raises(DBAPIError, match="row-level security"):
            c.execute(text("UPDATE memories SET text = 'x' WHERE id = :i"), {"i": m_keep["id"]})
        c.rollback()
    # Diff names the three changes; promote applies the new wording to main as a new version.
    changes = client.get("/v1/branches/trial/diff", headers=steward.h).json()["changes"]
    assert sorted(c["change"] for c in changes) == ["created", "deleted", "new_version"]
    new_version = next(c for c in changes if c["change"] == "new_version")
    r = client.post("/v1/branches/trial/promote", json={"ids": [new_version["id"]]}, headers=steward.h)
    assert r.status_code == 200, r.text
    main_id = r.json()["promoted"][0]["main_id"]
    assert _texts(client, steward) == {"keep me", "new wording", "delete me in the branch", "main after fork"}
    promoted = client.get(f"/v1/memories/{main_id}", headers=steward.h).json()
    assert promoted["root_id"] == m_edit["root_id"] and promoted["version"] == 2
    assert promoted["provenance"]["promoted_from"] == {"branch": "trial", "id": new_version["id"]}
    with admin_engine.connect() as c:  # lineage to the branch item (shown to auditors as a placeholder)
        assert (
            c.execute(
                text("SELECT relation FROM lineage_edges WHERE from_id = :m AND to_id = :b"),
                {"m": main_id, "b": new_version["id"]},
            ).scalar()
            == "promoted_from"
        )
    assert client.post("/v1/branches/trial/promote", json={"ids": [str(uuid.uuid4())]}, headers=steward.h).status_code == 404
    # Drop: the branch's rows go, main stays.
    with admin_engine.connect() as c:
        in_branch = c.execute(text("SELECT count(*) FROM memories WHERE branch_id = :b"), {"b": b["id"]}).scalar()
    assert in_branch == 2
    main_rows = count(admin_engine, "memories", steward.org_id) - in_branch
    assert client.delete("/v1/branches/trial", headers=steward.h).status_code == 204
    assert count(admin_engine, "memories", steward.org_id) == main_rows
    assert client.post("/v1/search", json={"query": TOKEN}, headers=_h(steward, "trial")).status_code == 404


def test_branch_patches_a_main_memory_that_main_superseded_after_the_fork(client, world):
    """Found by the property test (tests/test_branch_property.py): in the branch the main version
    is still the current one, although main has since written a newer version and marked its row
    superseded; the branch's patch and declassify must not answer 409 not_current_version."""
    org = world.org()
    steward = world.user(org, roles=("steward",))
    m = _mem(client, steward, "v1", visibility="private")
    _branch(client, steward, "later")
    r = client.patch(f"/v1/memories/{m['id']}", json={"text": f"{TOKEN} main v2"}, headers=steward.h)
    assert r.status_code == 200, r.text
    seen = client.get(f"/v1/memories/{m['id']}", headers=_h(steward, "later")).json()
    assert (seen["status"], seen["superseded_at"]) == ("active", None)  # the branch's current version
    r = client.post(
        f"/v1/memories/{m['id']}/declassify", json={"visibility": "org", "reason": "review"}, headers=_h(steward, "later")
    )
    assert r.status_code == 200, r.text
    r = client.patch(f"/v1/memories/{r.json()['id']}", json={"text": f"{TOKEN} branch v3"}, headers=_h(steward, "later"))
    assert r.status_code == 200, r.text
    assert _texts(client, steward, branch="later") == {"branch v3"}
    assert _texts(client, steward) == {"main v2"}
    # in main the old version is superseded: patching it there is still refused
    r = client.patch(f"/v1/memories/{m['id']}", json={"text": f"{TOKEN} again"}, headers=steward.h)
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_current_version"


def test_branch_api_rules(client, world):
    org = world.org()
    steward = world.user(org, roles=("steward",))
    member = world.user(org)
    assert client.post("/v1/branches", json={"name": "x"}, headers=member.h).status_code == 403
    _branch(client, steward, "a")
    assert client.post("/v1/branches", json={"name": "a"}, headers=steward.h).status_code == 409
    assert client.post("/v1/branches", json={"name": "main"}, headers=steward.h).status_code == 409
    assert client.post("/v1/branches", json={"name": "b", "from": "nope"}, headers=steward.h).status_code == 404
    assert client.post("/v1/branches", json={"name": "Bad Name"}, headers=steward.h).status_code == 422
    assert client.post("/v1/branches", json={"name": "c", "at": "2999-01-01T00:00:00Z"}, headers=steward.h).status_code == 422
    assert client.post("/v1/search", json={"query": "x"}, headers=_h(member, "nope")).status_code == 404
    assert [b["name"] for b in client.get("/v1/branches", headers=member.h).json()["branches"]] == ["a"]
    # A branch of a branch, and the parent cannot be dropped under it.
    _branch(client, steward, "a2", **{"from": "a"})
    assert client.delete("/v1/branches/a", headers=steward.h).status_code == 409
    # Retention and cartridge training run in main only (retention reaches every branch itself).
    r = client.post("/v1/jobs", json={"kind": "retention"}, headers=_h(steward, "a"))
    assert r.status_code == 422 and r.json()["error"]["code"] == "not_in_a_branch"


def test_branch_of_a_branch_and_fork_in_the_past(client, world):
    org = world.org()
    steward = world.user(org, roles=("steward",))
    _mem(client, steward, "first")
    t1 = _now()
    _mem(client, steward, "second")
    _branch(client, steward, "past", at=t1)
    assert _texts(client, steward, branch="past") == {"first"}
    _mem(client, steward, "in past", branch="past")
    _branch(client, steward, "child", **{"from": "past"})
    _mem(client, steward, "in past later", branch="past")
    _mem(client, steward, "in child", branch="child")
    assert _texts(client, steward, branch="child") == {"first", "in past", "in child"}
    assert _texts(client, steward, branch="past") == {"first", "in past", "in past later"}
    assert _texts(client, steward) == {"first", "second"}


def test_branches_leak_nothing_across_users_and_orgs(client, world):
    org, other_org = world.org(), world.org()
    steward = world.user(org, roles=("steward",))
    alice = world.user(org)
    outsider = world.user(other_org, roles=("steward",))
    _mem(client, alice, "alice private")
    _branch(client, steward, "s")
    _mem(client, alice, "alice private in branch", branch="s")
    assert _texts(client, steward, branch="s") == set()
    assert _texts(client, alice, branch="s") == {"alice private", "alice private in branch"}
    # The steward's diff lists none of alice's private changes; the other org cannot name the branch.
    assert client.get("/v1/branches/s/diff", headers=steward.h).json()["changes"] == []
    assert client.get("/v1/branches/s/diff", headers=outsider.h).status_code == 404
    assert client.post("/v1/search", json={"query": TOKEN}, headers=_h(outsider, "s")).status_code == 404


def test_erasure_reaches_every_branch(client, world, admin_engine):
    org = world.org()
    admin = world.user(org, roles=("admin",))
    bob = world.user(org)
    _branch(client, admin, "lab")
    r = client.post("/v1/episodes", json=ep(f"{TOKEN} bob's branch trace"), headers=_h(bob, "lab"))
    assert r.status_code == 201
    _mem(client, bob, "bob in branch", branch="lab")
    with admin_engine.connect() as c:
        before = c.execute(
            text("SELECT count(*) FROM episodes WHERE owner_id = :u AND branch_id IS NOT NULL"), {"u": bob.user_id}
        ).scalar()
    assert before == 1
    assert client.delete(f"/v1/users/{bob.user_id}/data", headers=admin.h).status_code == 202
    with admin_engine.connect() as c:
        for t in ("episodes", "memories"):
            assert c.execute(text(f"SELECT count(*) FROM {t} WHERE owner_id = :u"), {"u": bob.user_id}).scalar() == 0


def test_a_job_runs_in_its_branch(client, world, settings, app, embedder):
    from app.jobs.runner import JobContext, Resources, run_job

    org = world.org()
    steward = world.user(org, roles=("steward",))
    _mem(client, steward, "the build cache lives in the eu bucket", visibility="org")
    _mem(client, steward, "the build cache lives in the eu bucket", visibility="org")
    _branch(client, steward, "consolidate-trial")
    r = client.post("/v1/jobs", json={"kind": "consolidate"}, headers=_h(steward, "consolidate-trial"))
    assert r.status_code == 202
    ctx = JobContext(
        settings=settings,
        sessions=app.state.sessions,
        org_id=steward.org_id,
        job_id=r.json()["id"],
        resources=Resources(settings, _embedder=embedder),
    )
    job = run_job(ctx)
    assert job.status == "succeeded", job.error
    assert job.stats["merged"] == 1
    # The duplicate is gone in the branch only.
    search = {"query": TOKEN, "types": ["memory"], "mode": "text", "k": 10}
    assert len(client.post("/v1/search", json=search, headers=_h(steward, "consolidate-trial")).json()["results"]) == 1
    assert len(client.post("/v1/search", json=search, headers=steward.h).json()["results"]) == 2


def test_agent_profile_is_memory(client, world):
    org, other_org = world.org(), world.org()
    steward = world.user(org, roles=("steward",))
    member = world.user(org)
    outsider = world.user(other_org)

    def profile(text_: str, kind: str, **kw) -> dict:
        r = client.post(
            "/v1/memories",
            json={"text": text_, "kind": kind, "agent_id": "support-bot", "visibility": "org", **kw},
            headers=steward.h,
        )
        assert r.status_code == 201, r.text
        return r.json()

    instr = profile("You are the support bot. Answer in two sentences and cite the runbook.", "instruction")
    profile("Refunds: check the order id in billing before promising anything.", "skill")
    profile("Password resets: send the self-service link, never reset by hand.", "skill")
    # Kinds and agent_id go together.
    assert client.post("/v1/memories", json={"text": "x", "kind": "instruction"}, headers=steward.h).status_code == 422
    assert client.post("/v1/memories", json={"text": "x", "kind": "fact", "agent_id": "a"}, headers=steward.h).status_code == 422
    body = {"query": "a customer wants a refund for order 1234", "agent_id": "support-bot", "budget_tokens": 400}
    ctx = client.post("/v1/context", json=body, headers=member.h).json()
    names = [s["name"] for s in ctx["sections"]]
    assert names[:2] == ["instructions", "skills"], names
    assert ctx["text"].startswith("## Instructions\n- You are the support bot.")
    assert ctx["text"].index("Refunds") < ctx["text"].index("Password resets")  # the relevant skill first
    assert ctx["tokens"] <= 400
    # Versioned: the new instruction replaces the old; in a branch a trial prompt leaves main alone.
    client.post("/v1/branches", json={"name": "prompt-trial"}, headers=steward.h)
    r = client.patch(
        f"/v1/memories/{instr['id']}",
        json={"text": "You are the support bot. Be brief."},
        headers={**steward.h, "Memscale-Branch": "prompt-trial"},
    )
    assert r.status_code == 200, r.text
    in_branch = client.post("/v1/context", json=body, headers={**member.h, "Memscale-Branch": "prompt-trial"}).json()
    assert "Be brief." in in_branch["text"] and "two sentences" not in in_branch["text"]
    assert "two sentences" in client.post("/v1/context", json=body, headers=member.h).json()["text"]
    assert client.patch(f"/v1/memories/{instr['id']}", json={"kind": "fact"}, headers=steward.h).status_code == 422
    # Another org cannot use (or learn of) this agent's profile.
    r = client.post("/v1/context", json=body, headers=outsider.h)
    assert r.status_code == 404 and r.json()["error"]["code"] == "agent_not_found"


def test_distillation_in_a_branch_writes_only_there(client, world, settings, app, embedder, admin_engine):
    import json

    from app.jobs.runner import JobContext, Resources, run_job
    from app.llm.fake import FakeGateway

    org = world.org()
    steward = world.user(org, roles=("steward",))
    before = client.post(
        "/v1/episodes",
        json=ep("I always use the staging cluster for load tests.", kind="conversation", visibility="org"),
        headers=steward.h,
    )
    assert before.status_code == 201
    _branch(client, steward, "distil-trial")
    r = client.post(
        "/v1/episodes",
        json=ep("We never deploy on Fridays.", kind="conversation", visibility="org"),
        headers=_h(steward, "distil-trial"),
    )
    assert r.status_code == 201
    job = client.post(
        "/v1/jobs", json={"kind": "distill", "params": {"min_age_s": 0}}, headers=_h(steward, "distil-trial")
    ).json()
    fake = FakeGateway(default=json.dumps({"score": 0.9, "useful": 1, "suspicious": 0, "reason": "ok", "memories": []}))
    done = run_job(
        JobContext(
            settings=settings,
            sessions=app.state.sessions,
            org_id=steward.org_id,
            job_id=job["id"],
            resources=Resources(settings, _embedder=embedder, _gateway=fake),
        )
    )
    assert done.status == "succeeded", done.error
    with admin_engine.connect() as c:
        rows = c.execute(
            text("SELECT branch_id IS NULL AS main, count(*) FROM memories WHERE org_id = :o GROUP BY 1"), {"o": steward.org_id}
        ).all()
        quality = c.execute(text("SELECT quality FROM episodes WHERE id = :i"), {"i": before.json()["id"]}).scalar()
    assert dict(rows) == {False: done.stats["memories_created"]} and done.stats["memories_created"] >= 2
    assert quality is None  # the base episode's judgement stays the branch's business
    # Main's own distillation has not run: its watermark is untouched by the branch's.
    assert (
        client.post("/v1/search", json={"query": "deploy Fridays staging", "types": ["memory"]}, headers=steward.h).json()[
            "results"
        ]
        == []
    )


def test_idempotency_key_is_per_branch(client, world, admin_engine):
    """The same key and body in main and in a branch are two writes (a replay of main's reply would
    tell the client its branch write happened when it did not); within a branch it replays."""
    org = world.org()
    steward = world.user(org, roles=("steward",))
    _branch(client, steward, "idem")
    body, key = ep(f"{TOKEN} retried write"), {"Idempotency-Key": "k-1"}
    main_id = client.post("/v1/episodes", json=body, headers={**steward.h, **key}).json()["id"]
    first = client.post("/v1/episodes", json=body, headers={**_h(steward, "idem"), **key})
    again = client.post("/v1/episodes", json=body, headers={**_h(steward, "idem"), **key})
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"] != main_id
    with admin_engine.connect() as c:
        rows = c.execute(
            text("SELECT branch_id IS NULL, count(*) FROM episodes WHERE org_id = :o GROUP BY 1"), {"o": steward.org_id}
        ).all()
    assert dict(rows) == {True: 1, False: 1}
