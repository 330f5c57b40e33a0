"""Stateful property test: random orgs, users, groups, labels and items; random operations
(create, derive a memory from a visible episode, patch, distil, consolidate, declassify, delete,
narrow to private / a group / more labels, fork a branch at a past instant, edit in a branch,
promote). After every step, for every principal, no read path returns anything the principal may
not see (get of any version, as-of get, search with status filters, the instruction "including
old versions too", search and context as of a past instant, reads in every branch, context and
its signed inference handoff, session tools, lineage, retrieval records), and nothing derived
survives the deletion of all its sources. The oracle is the Python rule `app.kit.tenancy.access.can_see`
applied to rows read with the owner connection (ground truth), a memory version taken at the
narrowest scope its memory has been given since (`_narrowest`: the meet with every later
version of its root written in main or in the version's own branch, written out here again,
independently of app.kit.tenancy.scope), so
the SQL filter, RLS and every endpoint are checked against an independent implementation.

Small in `make test`; long with `make test-long` (MEMSCALE_ACL_EXAMPLES / MEMSCALE_ACL_STEPS,
counts written to MEMSCALE_ACL_RESULTS, e.g. bench/results/acl_property.json)."""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from sqlalchemy import text

from app.auth.principal import Principal
from app.kit.tenancy.access import can_see
from app.llm.fake import FakeGateway

GROUPS = ["finance", "ops"]
LABELS = ["pii", "m&a"]
WORDS = ["invoice", "deploy", "salary", "merger", "vpn", "refund", "always", "never", "use", "prefer"]
GETS = int(os.environ.get("MEMSCALE_ACL_GETS", "12"))  # items fetched by id per principal and step
COUNTS = {
    "steps": 0,
    "checks": 0,
    "runs": 0,
    "leaks": 0,
    "derived_surviving_deletion": 0,
    "narrowed": 0,
    "forks": 0,
    "branch_edits": 0,
    "promotions": 0,
}  # the last four: accepted operations

scope_st = st.fixed_dictionaries(
    {
        "visibility": st.sampled_from(["private", "group", "org"]),
        "groups": st.lists(st.sampled_from(GROUPS), min_size=1, max_size=2, unique=True),
        "labels": st.lists(st.sampled_from(LABELS), max_size=2, unique=True),
    }
)
sentence = st.lists(st.sampled_from(WORDS), min_size=3, max_size=7).map(lambda w: "I " + " ".join(w) + ".")


def _meet(a: tuple, b: tuple) -> tuple:
    """The oracle's meet of two scopes (visibility, groups, labels): private wins, groups
    intersect (none in common: private), labels union."""
    labels = a[2] | b[2]
    if "private" in (a[0], b[0]):
        return ("private", frozenset(), labels)
    if "org" in (a[0], b[0]):
        other = b if a[0] == "org" else a
        return (other[0], other[1], labels)
    common = a[1] & b[1]
    return ("group", common, labels) if common else ("private", frozenset(), labels)


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
        self.instants, self.branches = [self._now()], {0: [], 1: []}  # past instants; branch names per org
        n = COUNTS["runs"]  # every example starts with one story of issue 41, a different one each time
        self._story(
            n % 2,
            n % 3,
            "I always use the vpn.",
            ["private", "group", "labels"][n % 3],
            n % 2,
            ["before", "at", "before", "none"][n % 4],
            n % 3 != 2,
            n % 5 in (1, 2),
        )

    @staticmethod
    def _now() -> str:
        return datetime.now(UTC).isoformat()

    def _principal(self, a) -> Principal:
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

    @rule(who=st.integers(0, 7), pick=st.integers(0, 10_000), content=sentence, kind=st.sampled_from(["episode", "memory"]))
    def derive_memory(self, who, pick, content, kind):
        """A private memory derived from an episode or a memory the actor can see (often someone
        else's; a memory may itself be derived, so deletions must cascade through chains)."""
        a = self.actors[who]
        p = self.principals[a.user_id]
        seen = [
            (i, r)
            for i, (t, r) in sorted(self._truth().items())
            if t == kind
            and r.org_id == a.org_id
            and can_see(p, org_id=r.org_id, owner_id=r.owner_id, visibility=r.visibility, groups=r.groups, labels=r.labels)
        ]
        if seen:
            i, src = seen[pick % len(seen)]
            r = self.client.post(
                "/v1/memories",
                json={
                    "text": content,
                    "kind": "fact",
                    "visibility": "private",
                    "labels": list(src.labels),
                    "sources": [{"type": kind, "id": i}],
                },
                headers=a.h,
            )
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
            r = self.client.post(
                f"/v1/memories/{ids[pick % len(ids)]}/declassify",
                json={**_access(scope), "reason": "property test"},
                headers=self.actors[who].h,
            )
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

    # -- history and branches (issue 41) ----------------------------------------------------------
    # Acting as the memory's owner (or the org's steward) most of the time, so that the writes
    # happen rather than answer 403; the 403/404/409/422 paths are allowed answers all the same.
    def _actor(self, org: int, owner_id, as_owner: bool):
        """The owner of a row (as_owner) or the org's steward."""
        if as_owner:
            return next(a for a in self.actors if a.user_id == owner_id)
        return self.actors[org * 4 + 2]

    def _narrow(self, a, id_, labels, how: str, tag: int, branch: str | None = None) -> int:
        body = {
            "private": {"visibility": "private"},
            "group": {"visibility": "group", "groups": [GROUPS[tag]]},
            "labels": {"labels": sorted(set(labels) | {LABELS[tag]})},
        }[how]
        r = self.client.patch(
            f"/v1/memories/{id_}", json=body, headers={**a.h, **({"Memscale-Branch": branch} if branch else {})}
        )
        assert r.status_code in (200, 403, 404, 409, 422), r.text  # 422: wider than it is (private -> group)
        COUNTS["narrowed"] += r.status_code == 200
        return r.status_code

    @rule(
        org=st.integers(0, 1),
        pick=st.integers(0, 10_000),
        how=st.sampled_from(["private", "group", "labels"]),
        tag=st.integers(0, 1),
        as_owner=st.booleans(),
    )
    def narrow_memory(self, org, pick, how, tag, as_owner):
        """PATCH a current version in main to private, to one group, or to more labels."""
        self.instants.append(self._now())
        rows = self._rows("memories", self.actors[org * 4].org_id, "status = 'active' AND branch_id IS NULL", "owner_id, labels")
        if rows:
            id_, (owner_id, labels) = rows[pick % len(rows)]
            self._narrow(self._actor(org, owner_id, as_owner), id_, labels, how, tag)
        COUNTS["steps"] += 1

    @rule(
        org=st.integers(0, 1),
        who=st.integers(0, 3),
        content=sentence,
        how=st.sampled_from(["private", "group", "labels"]),
        tag=st.integers(0, 1),
        fork=st.sampled_from(["none", "before", "at"]),
        edit=st.booleans(),
        in_branch=st.booleans(),
    )
    def share_then_narrow(self, org, who, content, how, tag, fork, edit, in_branch):
        self._story(org, who, content, how, tag, fork, edit, in_branch)

    def _story(self, org, who, content, how, tag, fork, edit, in_branch):
        """Issue 41's story in one step: an org memory; perhaps a branch forked now (or, after the
        narrowing, at this instant) and an edit there; then its owner narrows it (in main, or in
        the branch)."""
        a = self.actors[org * 4 + who % 3]  # a writer (not the auditor)
        r = self.client.post("/v1/memories", json={"text": content, "kind": "fact", "visibility": "org"}, headers=a.h)
        assert r.status_code == 201, r.text
        m = r.json()
        before = self._now()
        self.instants.append(before)
        name, target = f"b{len(self.branches[org])}", m["id"]
        if fork == "before":
            self._fork(org, name, None)
        if fork == "before" and edit:
            r = self.client.patch(
                f"/v1/memories/{m['id']}", json={"text": content + " edited"}, headers={**a.h, "Memscale-Branch": name}
            )
            assert r.status_code == 200, r.text
            COUNTS["branch_edits"] += 1
            target = r.json()["id"] if in_branch else target
        self._narrow(a, target, [], how, tag, name if fork == "before" and in_branch else None)
        if fork == "at":
            self._fork(org, name, before)
        COUNTS["steps"] += 1

    def _fork(self, org: int, name: str, at: str | None, a=None) -> None:
        """POST /v1/branches as `a` (members and auditors may not: 403), else as the org's steward
        (who must succeed); a branch made is remembered."""
        r = self.client.post(
            "/v1/branches", json={"name": name, **({"at": at} if at else {})}, headers=(a or self.actors[org * 4 + 2]).h
        )
        assert r.status_code in ((201, 403) if a else (201,)), r.text
        if r.status_code == 201:
            self.branches[org].append(name)
            COUNTS["forks"] += 1

    @rule(who=st.integers(0, 7), pick=st.integers(0, 10_000))
    def fork_branch(self, who, pick):
        """POST /v1/branches {name, at}: a branch of main as it stood at an earlier instant."""
        org = who // 4
        self._fork(org, f"b{len(self.branches[org])}", self.instants[pick % len(self.instants)], self.actors[who])
        self.instants.append(self._now())
        COUNTS["steps"] += 1

    @rule(
        org=st.integers(0, 1),
        pick=st.integers(0, 10_000),
        b=st.integers(0, 10),
        content=sentence,
        private=st.booleans(),
        as_owner=st.booleans(),
    )
    def edit_in_branch(self, org, pick, b, content, private, as_owner):
        """PATCH any version in a branch (it answers 404 for what the branch does not show)."""
        names = self.branches[org]
        rows = self._rows("memories", self.actors[org * 4].org_id, "true", "owner_id")
        if names and rows:
            id_, owner_id = rows[pick % len(rows)]
            a = self._actor(org, owner_id, as_owner)
            body = {"text": content, **({"visibility": "private"} if private else {})}
            r = self.client.patch(f"/v1/memories/{id_}", json=body, headers={**a.h, "Memscale-Branch": names[b % len(names)]})
            assert r.status_code in (200, 403, 404, 409, 422), r.text
            COUNTS["branch_edits"] += r.status_code == 200
        self.instants.append(self._now())
        COUNTS["steps"] += 1

    @rule(org=st.integers(0, 1), pick=st.integers(0, 10_000), b=st.integers(0, 10))
    def promote(self, org, pick, b):
        """The org's steward promotes one memory change of a branch that its diff shows."""
        names, a = self.branches[org], self.actors[org * 4 + 2]
        if names:
            name = names[b % len(names)]
            r = self.client.get(f"/v1/branches/{name}/diff", headers=a.h)
            assert r.status_code == 200, r.text
            changes = [c["id"] for c in r.json()["changes"] if c["type"] == "memory"]
            if changes:
                r = self.client.post(f"/v1/branches/{name}/promote", json={"ids": [changes[pick % len(changes)]]}, headers=a.h)
                assert r.status_code in (200, 404, 409, 422), r.text
                COUNTS["promotions"] += r.status_code == 200
        self.instants.append(self._now())
        COUNTS["steps"] += 1

    def _rows(self, table: str, org_id, where: str, cols: str) -> list[tuple]:
        """(id, value) or (id, (values...)) of the org's rows of `table`, by id."""
        with self.admin_engine.connect() as c:
            rows = c.execute(
                text(f"SELECT id, {cols} FROM {table} WHERE org_id = :o AND {where} ORDER BY id"), {"o": org_id}
            ).all()
        return [(str(r[0]), r[1] if len(r) == 2 else tuple(r[1:])) for r in rows]

    def _narrowest(self) -> dict:
        """id -> (branch_id, narrowest scope) of every memory version: its own scope met with that of
        every version of its root recorded after it in main (which reaches every branch) or in the
        version's own branch (a branch write never changes main or another branch)."""
        with self.admin_engine.connect() as c:
            rows = c.execute(
                text(
                    "SELECT id, root_id, branch_id, visibility, groups, labels, recorded_at FROM memories "
                    "WHERE org_id IN (SELECT DISTINCT org_id FROM users WHERE id = ANY(:u))"
                ),
                {"u": list(self.principals)},
            ).all()
        by_root: dict = {}
        for r in rows:
            by_root.setdefault(r.root_id, []).append(r)
        out = {}
        for r in rows:
            scope = (r.visibility, frozenset(r.groups), frozenset(r.labels))
            for w in by_root[r.root_id]:
                if w.recorded_at > r.recorded_at and (w.branch_id is None or w.branch_id == r.branch_id):
                    scope = _meet(scope, (w.visibility, frozenset(w.groups), frozenset(w.labels)))
            out[str(r.id)] = (r.branch_id, scope)
        return out

    def _ids(self, table: str, org_id, where: str = "true") -> list[str]:
        with self.admin_engine.connect() as c:
            return [
                str(i)
                for i in c.execute(
                    text(f"SELECT id FROM {table} WHERE org_id = :o AND {where} ORDER BY id"), {"o": org_id}
                ).scalars()
            ]

    # -- the property ---------------------------------------------------------------------------
    def _truth(self) -> dict:
        rows = {}
        with self.admin_engine.connect() as c:
            for table, type_ in (("episodes", "episode"), ("memories", "memory")):
                for r in c.execute(
                    text(
                        f"SELECT id, org_id, owner_id, visibility, groups, labels, "
                        f"{'status' if table == 'memories' else chr(39) + 'active' + chr(39)} AS status "
                        f"FROM {table} WHERE org_id IN (SELECT DISTINCT org_id FROM users WHERE id = ANY(:u))"
                    ),
                    {"u": list(self.principals)},
                ):
                    rows[str(r.id)] = (type_, r)
        return rows

    @invariant()
    def nothing_leaks(self):
        if not hasattr(self, "actors"):
            return
        truth, narrowest = self._truth(), self._narrowest()
        for a in self.actors:
            p = self.principals[a.user_id]
            allowed = set()
            for i, (_, r) in truth.items():
                vis, groups, labels = narrowest[i][1] if i in narrowest else (r.visibility, r.groups, r.labels)
                if can_see(p, org_id=r.org_id, owner_id=r.owner_id, visibility=vis, groups=groups, labels=labels):
                    allowed.add(i)
            for i, (type_, _) in sorted(truth.items())[-GETS:]:  # get (a sample; the ids change every step)
                path = "memories" if type_ == "memory" else "episodes"
                code = self.client.get(f"/v1/{path}/{i}", headers=a.h).status_code
                in_branch = i in narrowest and narrowest[i][0] is not None  # main reads no branch's rows
                assert (code == 200) == (i in allowed) or code == 403 or (in_branch and code == 404), (a.name, type_, i, code)
                COUNTS["checks"] += 1
            self._history_reads(a, allowed, set(truth), sorted(narrowest)[-max(2, GETS // 4) :])
            q = {"query": "invoice deploy salary merger refund", "k": 50}
            got = {
                x["id"]
                for x in self.client.post("/v1/search", json=q, headers=a.h).json()["results"]
                if x["type"] in ("episode", "memory")
            }
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
                r = self.client.post(f"/v1/sessions/{sid}/tools/{tool}", json={"query": q["query"], "k": 20}, headers=a.h)
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

    def _history_reads(self, a, allowed: set, known: set, sample: list[str]) -> None:
        """Issue 41's read paths: nothing beyond a memory's narrowest scope through as-of gets,
        status filters, the instruction, as-of search and context, or any read in a branch."""
        q = {"query": "invoice deploy salary merger refund", "k": 50}
        past = [self.instants[0], self.instants[len(self.instants) // 2], self.instants[-1]]

        def check(got: set, where) -> None:
            assert got <= allowed, (a.name, where, got - allowed)
            COUNTS["checks"] += 1

        for i in sample:  # GET of any version as of a past instant: 200 only when allowed
            code = self.client.get(f"/v1/memories/{i}", params={"as_of": past[1]}, headers=a.h).status_code
            check({i} if code == 200 else set(), ("get as_of", i))
        org = self.actors.index(a) // 4
        for branch in [None] + self.branches[org][-2:]:  # main and the two newest branches (the cost grows with them)
            h = {**a.h, **({"Memscale-Branch": branch} if branch else {})}
            bodies = [
                {**q, "filters": {"status": ["superseded"]}},
                {**q, "instruction": "including old versions too"},
                {**q, "as_of": past[0]},
                {**q, "as_of": past[1], "filters": {"status": ["active", "superseded"]}},
            ]
            for body in bodies if branch is None else bodies[:1] + [q]:
                r = self.client.post("/v1/search", json=body, headers=h)
                assert r.status_code == 200, r.text
                check({x["id"] for x in r.json()["results"] if x["type"] in ("episode", "memory")}, (branch, body))
            r = self.client.post("/v1/context", json={"query": q["query"], "budget_tokens": 800, "as_of": past[1]}, headers=h)
            assert r.status_code in (200, 403), r.text  # 403: auditors read no context
            if r.status_code == 200:
                check(
                    {i["id"] for s in r.json()["sections"] for i in s["items"] if i["type"] in ("episode", "memory")},
                    (branch, "context as_of"),
                )
            for i in sample if branch is not None else ():  # GET in a branch
                code = self.client.get(f"/v1/memories/{i}", headers=h).status_code
                check({i} if code == 200 else set(), (branch, "get", i))
            for i in sample[-2:]:  # lineage, in main and in each branch: no shown node beyond its scope
                r = self.client.get(f"/v1/lineage/memory/{i}", headers=h)
                if r.status_code == 200:
                    shown = {n["id"] for n in r.json()["nodes"] if not n.get("redacted") and not n.get("deleted")}
                    check({n for n in shown if n in known}, (branch, "lineage", i))

    def _session(self, a) -> str:
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
            rows = c.execute(
                text(
                    "SELECT m.root_id, bool_or(coalesce(e.id, s.id, k.id, a.id) IS NOT NULL) AS alive FROM memories m "
                    "JOIN lineage_edges l ON l.from_id = m.id AND l.from_type = 'memory' "
                    "AND l.relation IN ('distilled_from', 'summarised_from') "
                    "LEFT JOIN episodes e ON l.to_type = 'episode' AND e.id = l.to_id "
                    "LEFT JOIN memories s ON l.to_type = 'memory' AND s.id = l.to_id "
                    "LEFT JOIN chunks k ON l.to_type = 'chunk' AND k.id = l.to_id "
                    "LEFT JOIN knowledge_assets a ON l.to_type = 'asset' AND a.id = l.to_id "
                    "WHERE m.org_id = ANY(:o) GROUP BY m.root_id"
                ),
                {"o": list({a.org_id for a in self.actors})},
            ).all()
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
            rows = c.execute(
                text(
                    "SELECT m.id, m.owner_id, m.visibility, m.labels, "
                    "e.owner_id AS s_owner, e.visibility AS s_vis, e.labels AS s_labels "
                    "FROM memories m JOIN lineage_edges l ON l.from_id = m.id AND l.relation = 'distilled_from' "
                    "JOIN episodes e ON e.id = l.to_id WHERE m.org_id = ANY(:o) AND m.provenance->>'origin' = 'distill'"
                ),
                {"o": list({a.org_id for a in self.actors})},
            ).all()
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
    run.settings = hsettings(
        max_examples=examples, stateful_step_count=steps, deadline=None, suppress_health_check=list(HealthCheck)
    )
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
