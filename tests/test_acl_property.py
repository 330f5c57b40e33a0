"""Stateful property test: random orgs, users, groups, labels and items; random operations
(create, patch, distil, consolidate, declassify, delete). After every step, for every principal,
no read path returns anything the principal may not see. The oracle is the Python rule
`app.kit.access.can_see` applied to rows read with the owner connection (ground truth), so the
SQL filter, RLS and every endpoint are checked against an independent implementation."""

from __future__ import annotations

import json
import uuid
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
COUNTS = {"steps": 0, "checks": 0, "runs": 0}
RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "acl_property.json"

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
            for i, (type_, _) in sorted(truth.items())[-12:]:  # get (the newest ids change every step)
                path = "memories" if type_ == "memory" else "episodes"
                code = self.client.get(f"/v1/{path}/{i}", headers=a.h).status_code
                assert (code == 200) == (i in allowed) or code == 403, (a.name, type_, i, code)
                COUNTS["checks"] += 1
            q = {"query": "invoice deploy salary merger refund", "k": 50}
            got = {x["id"] for x in self.client.post("/v1/search", json=q, headers=a.h).json()["results"]
                   if x["type"] in ("episode", "memory")}
            assert got <= allowed, got - allowed
            ctx = self.client.post("/v1/context", json={"query": q["query"], "budget_tokens": 800}, headers=a.h).json()
            got = {i["id"] for s in ctx.get("sections", []) for i in s["items"] if i["type"] in ("episode", "memory")}
            assert got <= allowed, got - allowed
            COUNTS["checks"] += 2
            for i in list(truth)[:4]:  # lineage: no visible (non-redacted) node outside the allowed set
                r = self.client.get(f"/v1/lineage/{truth[i][0]}/{i}", headers=a.h)
                if r.status_code == 200:
                    shown = {n["id"] for n in r.json()["nodes"] if not n.get("redacted") and not n.get("deleted")}
                    assert shown <= allowed | {n for n in shown if n not in truth}, shown - allowed
                    assert all("text" not in n for n in r.json()["nodes"] if n.get("redacted"))
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
    run = ACLMachine.TestCase
    run.settings = hsettings(max_examples=3, stateful_step_count=8, deadline=None,
                             suppress_health_check=list(HealthCheck))
    run().runTest()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(COUNTS))
    assert COUNTS["runs"] >= 3 and COUNTS["steps"] >= 8 and COUNTS["checks"] >= 100, COUNTS
