"""Stateful property test: random orgs, users, groups, labels and items; random operations
(create, derive a memory from a visible episode, patch, distil, consolidate, declassify, delete).
After every step, for every principal, no read path returns anything the principal may not see
(get, search, context and its signed inference handoff, session tools, lineage, retrieval
records), and nothing derived survives the deletion of all its sources. The oracle is the Python
rule `app.kit.access.can_see` applied to rows read with the owner connection (ground truth), so
the SQL filter, RLS and every endpoint are checked against an independent implementation.

Small in `make test`; long with `make test-long` (MEMSCALE_ACL_EXAMPLES / MEMSCALE_ACL_STEPS,
counts written to MEMSCALE_ACL_RESULTS, e.g. bench/results/acl_property.json)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from hypothesis import HealthCheck, settings as hsettings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from sqlalchemy import text

from app.auth.principal import Principal
from app.kit.access import can_see
from app.llm.fake import FakeGateway

GROUPS = ["finance", "ops"]
LABELS = ["pii", "m&a"]
WORDS = ["invoice", "deploy", "salary", "merger", "vpn", "refund", "always", "never", "use", "prefer"]
GETS = int(os.environ.get("MEMSCALE_ACL_GETS", "12"))  # items fetched by id per principal and step
COUNTS = {"steps": 0, "checks": 0, "runs": 0, "leaks": 0, "derived_surviving_deletion": 0}

scope_st = st.fixed_dictionaries({
    "visibility": st.sampled_from(["private", "group", "org"]),
    "groups": st.lists(st.sampled_from(GROUPS), min_size=1, max_size=2, unique=True),
    "labels": st.lists(st.sampled_from(LABELS), max_size=2, unique=True),
})
sentence = st.lists(st.sampled_from(WORDS), min_size=3, max_size=7).map(lambda w: "I " + " ".join(w) + ".")


def _access(scope: dict) -> dict:
    out = {"visibility": scope["visibility"], "labels": scope["labels"]}
    if scope["visibility"] == "group":
        out["groups"] = scope["groups"]
    return out


class ACLMachine(RuleBasedStateMachine):
    client = world = admin_engine = run_job = None  # set by the test

    @initialize()
    def setup(self):
        COUNTS["runs"] += 1
        self.actors = []
        for _ in range(2):
            org = self.world.org()
            self.actors += [
                self.world.user(org, groups=["finance"], clearances=["pii"]),
                self.world.user(org, groups=["ops"], clearances=[]),
                self.world.user(org, roles=["steward"], groups=["finance", "ops"], clearances=["pii", "m&a"]),
                self.world.user(org, roles=["auditor"], clearances=[]),
            ]
        self.principals = {a.user_id: self._principal(a) for a in self.actors}
        self.sessions, self.retrievals = {}, {}

    def _principal(self, a) -> Principal:  # noqa: ANN001
        with self.admin_engine.connect() as c:
            u = c.execute(text("SELECT roles, groups, clearances FROM users WHERE id = :i"), {"i": a.user_id}).one()
        return Principal(a.org_id, a.user_id, a.name, tuple(u.roles), tuple(u.groups), tuple(u.clearances))

    # -- operations -----------------------------------------------------------------------------
    @rule(who=st.integers(0, 7), scope=scope_st, content=sentence)
    def create_episode(self, who, scope, content):
        a = self.actors[who]
        r = self.client.post("/v1/episodes", json={"kind": "note", "content": content, **_access(scope)}, headers=a.h)
        assert r.status_code in (201, 403), r.text  # auditors may not write
        COUNTS["steps"] += 1

    @rule(who=st.integers(0, 7), scope=scope_st, content=sentence)
    def create_memory(self, who, scope, content):
        a = self.actors[who]
        r = self.client.post("/v1/memories", json={"text": content, "kind": "fact", **_access(scope)}, headers=a.h)
        assert r.status_code in (201, 403), r.text
        COUNTS["steps"] += 1

    @rule(who=st.integers(0, 7), pick=st.integers(0, 10_000), content=sentence,
          kind=st.sampled_from(["episode", "memory"]))
    def derive_memory(self, who, pick, content, kind):
        """A private memory derived from an episode or a memory the actor can see (often someone
        else's; a memory may itself be derived, so deletions must cascade through chains)."""
        a = self.actors[who]
        p = self.principals[a.user_id]
        seen = [(i, r) for i, (t, r) in sorted(self._truth().items()) if t == kind and r.org_id == a.org_id
                and can_see(p, org_id=r.org_id, owner_id=r.owner_id, visibility=r.visibility, groups=r.groups,
                            labels=r.labels)]
        if seen:
            i, src = seen[pick % len(seen)]
            r = self.client.post("/v1/memories", json={"text": content, "kind": "fact", "visibility": "private",
                                                       "labels": list(src.labels),
                                                       "sources": [{"type": kind, "id": i}]}, headers=a.h)
            assert r.status_code in (201, 403, 422), r.text
        COUNTS["steps"] += 1

    @rule(who=st.integers(0, 7), pick=st.integers(0, 10_000), content=sentence)
    def patch_memory(self, who, pick, content):
        ids = self._ids("memories", self.actors[who].org_id, "status = 'active'")
        if ids:
            r = self.client.patch(f"/v1/memories/{ids[pick % len(ids)]}", json={"text": content}, headers=self.actors[who].h)
            assert r.status_code in (200, 403, 404), r.text
        COUNTS["steps"] += 1

    @rule(who=st.integers(0, 7), pick=st.integers(0, 10_000), scope=scope_st)
    def declassify(self, who, pick, scope):
        ids = self._ids("memories", self.actors[who].org_id, "status = 'active'")
        if ids:
            r = self.client.post(f"/v1/memories/{ids[pick % len(ids)]}/declassify",
                                 json={**_access(scope), "reason": "property test"}, headers=self.actors[who].h)
            assert r.status_code in (200, 403, 404), r.text
        COUNTS["steps"] += 1

    @rule(who=st.integers(0, 7), pick=st.integers(0, 10_000))
    def delete_episode(self, who, pick):
        ids = self._ids("episodes", self.actors[who].org_id)
        if ids:
            r = self.client.delete(f"/v1/episodes/{ids[pick % len(ids)]}", headers=self.actors[who].h)
            assert r.status_code in (202, 403, 404), r.text
        COUNTS["steps"] += 1

    @rule(who=st.integers(0, 7), pick=st.integers(0, 10_000), a_source=st.booleans())
    def delete_memory(self, who, pick, a_source):
        """DELETE of a memory of the actor's org (`a_source`: one something was derived from, when
        there is one): what was derived from it must follow."""
        org = self.actors[who].org_id
        sources = "id IN (SELECT to_id FROM lineage_edges WHERE to_type = 'memory' AND relation = 'distilled_from')"
        ids = (a_source and self._ids("memories", org, sources)) or self._ids("memories", org)
        if ids:
            r = self.client.delete(f"/v1/memories/{ids[pick % len(ids)]}", headers=self.actors[who].h)
            assert r.status_code in (204, 403, 404), r.text
        COUNTS["steps"] += 1

    @rule(org=st.integers(0, 1))
    def distil_and_consolidate(self, org):
        fake = FakeGateway(default=json.dumps({"score": 0.9, "useful": 1, "suspicious": 0, "reason": "ok", "memories": []}))
        org_id = self.actors[org * 4].org_id
        assert self.run_job(org_id, "distill", {"min_age_s": 0}, gateway=fake).status == "succeeded"
        assert self.run_job(org_id, "consolidate", {}).status == "succeeded"
        COUNTS["steps"] += 1

    def _ids(self, table: str, org_id, where: str = "true") -> list[str]:
        with self.admin_engine.connect() as c:
            return [str(i) for i in c.execute(text(f"SELECT id FROM {table} WHERE org_id = :o AND {where} ORDER BY id"),
                                              {"o": org_id}).scalars()]

    # -- the property ---------------------------------------------------------------------------
    def _truth(self) -> dict:
        rows = {}
        with self.admin_engine.connect() as c:
            for table, type_ in (("episodes", "episode"), ("memories", "memory")):
                for r in c.execute(text(f"SELECT id, org_id, owner_id, visibility, groups, labels, "
                                        f"{'status' if table == 'memories' else chr(39) + 'active' + chr(39)} AS status "
                                        f"FROM {table} WHERE org_id IN (SELECT DISTINCT org_id FROM users WHERE id = ANY(:u))"),
                                   {"u": list(self.principals)}):
                    rows[str(r.id)] = (type_, r)
        return rows

    @invariant()
    def nothing_leaks(self):
        if not hasattr(self, "actors"):
            return
        truth = self._truth()
        for a in self.actors:
            p = self.principals[a.user_id]
            allowed = {i for i, (_, r) in truth.items() if can_see(p, org_id=r.org_id, owner_id=r.owner_id,
                       visibility=r.visibility, groups=r.groups, labels=r.labels)}
            for i, (type_, _) in sorted(truth.items())[-GETS:]:  # get (a sample; the ids change every step)
                path = "memories" if type_ == "memory" else "episodes"
                code = self.client.get(f"/v1/{path}/{i}", headers=a.h).status_code
                assert (code == 200) == (i in allowed) or code == 403, (a.name, type_, i, code)
                COUNTS["checks"] += 1
            q = {"query": "invoice deploy salary merger refund", "k": 50}
            got = {x["id"] for x in self.client.post("/v1/search", json=q, headers=a.h).json()["results"]
                   if x["type"] in ("episode", "memory")}
            assert got <= allowed, got - allowed
            r = self.client.post("/v1/context", json={"query": q["query"], "budget_tokens": 800}, headers=a.h)
            assert r.status_code in (200, 403), r.text
            ctx = r.json() if r.status_code == 200 else {"sections": [], "handoff": None, "retrieval_id": None}
            got = {i["id"] for s in ctx.get("sections", []) for i in s["items"] if i["type"] in ("episode", "memory")}
            assert got <= allowed, got - allowed
            if ctx["handoff"] is not None:
                # The signed handoff grants exactly the chunks it names, to this principal.
                grant = json.loads(base64.urlsafe_b64decode(ctx["handoff"]["token"].split(".")[1] + "=="))
                assert set(grant["chunks"]) == {c["content_hash"] for c in ctx["handoff"]["chunks"]}
                assert grant["sub"] == str(a.user_id) and grant["org"] == str(a.org_id)
            COUNTS["checks"] += 3
            # Session tools search through the same access rule.
            sid = self._session(a)
            for tool in ("memory_retrieve", "archival_search", "recall_search") if sid else ():
                r = self.client.post(f"/v1/sessions/{sid}/tools/{tool}", json={"query": q["query"], "k": 20},
                                     headers=a.h)
                if r.status_code == 200:
                    got = {x["id"] for x in r.json().get("results", []) if x.get("type") in ("episode", "memory")}
                    assert got <= allowed, (tool, got - allowed)
                COUNTS["checks"] += 1
            # Another actor's retrieval record and session are 404.
            for other in self.actors:
                if other.user_id != a.user_id and other.user_id in self.retrievals:
                    code = self.client.get(f"/v1/retrievals/{self.retrievals[other.user_id]}", headers=a.h).status_code
                    auditor = other.org_id == a.org_id and {"auditor", "admin"} & set(self.principals[a.user_id].roles)
                    assert code == (200 if auditor else 404), (a.name, code)
                    COUNTS["checks"] += 1
                if other.user_id != a.user_id and self.sessions.get(other.user_id):
                    code = self.client.get(f"/v1/sessions/{self.sessions[other.user_id]}", headers=a.h).status_code
                    assert code in (403, 404), (a.name, code)  # 403: the role may not read sessions at all
                    COUNTS["checks"] += 1
            if ctx["retrieval_id"]:
                self.retrievals[a.user_id] = ctx["retrieval_id"]
            for i in list(truth)[:4]:  # lineage: no visible (non-redacted) node outside the allowed set
                r = self.client.get(f"/v1/lineage/{truth[i][0]}/{i}", headers=a.h)
                if r.status_code == 200:
                    shown = {n["id"] for n in r.json()["nodes"] if not n.get("redacted") and not n.get("deleted")}
                    assert shown <= allowed | {n for n in shown if n not in truth}, shown - allowed
                    assert all("text" not in n for n in r.json()["nodes"] if n.get("redacted"))
                COUNTS["checks"] += 1

    def _session(self, a) -> str:  # noqa: ANN001
        if a.user_id not in self.sessions:
            r = self.client.post("/v1/sessions", json={}, headers=a.h)
            assert r.status_code in (201, 403), r.text  # auditors hold no sessions
            self.sessions[a.user_id] = r.json()["id"] if r.status_code == 201 else None
        return self.sessions[a.user_id]

    @invariant()
    def nothing_derived_outlives_its_sources(self):
        """A memory root derived from sources keeps at least one of them; once they are all gone,
        so is the memory (whoever deleted them, whoever owned the memory), whatever their type:
        episode, memory (a version, itself perhaps derived), chunk or asset."""
        if not hasattr(self, "actors"):
            return
        with self.admin_engine.connect() as c:
            rows = c.execute(text(
                "SELECT m.root_id, bool_or(coalesce(e.id, s.id, k.id, a.id) IS NOT NULL) AS alive FROM memories m "
                "JOIN lineage_edges l ON l.from_id = m.id AND l.from_type = 'memory' "
                "AND l.relation IN ('distilled_from', 'summarised_from') "
                "LEFT JOIN episodes e ON l.to_type = 'episode' AND e.id = l.to_id "
                "LEFT JOIN memories s ON l.to_type = 'memory' AND s.id = l.to_id "
                "LEFT JOIN chunks k ON l.to_type = 'chunk' AND k.id = l.to_id "
                "LEFT JOIN knowledge_assets a ON l.to_type = 'asset' AND a.id = l.to_id "
                "WHERE m.org_id = ANY(:o) GROUP BY m.root_id"), {"o": list({a.org_id for a in self.actors})}).all()
        for r in rows:
            if not r.alive:
                COUNTS["derived_surviving_deletion"] += 1
            assert r.alive, f"memory root {r.root_id} outlived every source"
            COUNTS["checks"] += 1

    @invariant()
    def derived_scope_no_wider_than_sources(self):
        if not hasattr(self, "actors"):
            return
        with self.admin_engine.connect() as c:
            rows = c.execute(text(
                "SELECT m.id, m.owner_id, m.visibility, m.labels, e.owner_id AS s_owner, e.visibility AS s_vis, e.labels AS s_labels "
                "FROM memories m JOIN lineage_edges l ON l.from_id = m.id AND l.relation = 'distilled_from' "
                "JOIN episodes e ON e.id = l.to_id WHERE m.org_id = ANY(:o) AND m.provenance->>'origin' = 'distill'"),
                {"o": list({a.org_id for a in self.actors})}).all()
        for r in rows:
            assert set(r.s_labels) <= set(r.labels)
            if r.s_vis == "private":
                assert r.visibility == "private" and r.owner_id == r.s_owner
            assert r.owner_id == r.s_owner  # never one memory across owners
            COUNTS["checks"] += 1


def test_no_read_path_leaks(client, world, admin_engine, run_job):
    ACLMachine.client, ACLMachine.world, ACLMachine.admin_engine = client, world, admin_engine
    ACLMachine.run_job = staticmethod(run_job)
    examples = int(os.environ.get("MEMSCALE_ACL_EXAMPLES", "3"))
    steps = int(os.environ.get("MEMSCALE_ACL_STEPS", "8"))
    run = ACLMachine.TestCase
    run.settings = hsettings(max_examples=examples, stateful_step_count=steps, deadline=None,
                             suppress_health_check=list(HealthCheck))
    try:
        run().runTest()
    except AssertionError:
        COUNTS["leaks"] += 1
        raise
    finally:
        if os.environ.get("MEMSCALE_ACL_RESULTS"):  # long runs keep their counts (docs/security.md)
            out = Path(os.environ["MEMSCALE_ACL_RESULTS"])
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({**COUNTS, "examples": examples, "steps_per_example": steps}, indent=1) + "\n")
    assert COUNTS["runs"] >= examples and COUNTS["steps"] >= steps and COUNTS["checks"] >= 100, COUNTS
    assert COUNTS["derived_surviving_deletion"] == 0
