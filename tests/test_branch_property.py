"""Stateful property test of branches (issue 18): random interleavings of creates, new versions
and deletions in main and in a branch forked at a random point. After every step, for every
user, a read in the branch equals "main as of the fork + the branch's own operations" and a read
in main equals main's own operations, computed by a plain Python model; nobody reads an item they
may not see (private items of another user), in either."""

from __future__ import annotations

import os

from hypothesis import HealthCheck
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

TOKEN = "quasarfjord"
WHERE = st.sampled_from(["main", "branch"])


class BranchMachine(RuleBasedStateMachine):
    client = world = None  # set by the test

    @initialize()
    def setup(self):
        org = self.world.org()
        self.steward = self.world.user(org, roles=["steward"])
        self.users = [self.steward, self.world.user(org), self.world.user(org)]
        self.n = 0
        # root -> (text, owner index, visibility)
        self.state = {"main": {}, "branch": None}
        self.own = set()  # roots the branch wrote a version of (main's later deletion leaves those)
        self.roots = {}  # root -> the id of the newest version in each place: {(where, root): id}

    def _h(self, who: int, where: str) -> dict:
        return {**self.users[who].h, **({"Memscale-Branch": "b"} if where == "branch" else {})}

    def _text(self) -> str:
        self.n += 1
        return f"{TOKEN} item{self.n}"

    @rule(where=WHERE, who=st.integers(0, 2), private=st.booleans())
    def create(self, where, who, private):
        if where == "branch" and self.state["branch"] is None:
            where = "main"
        t = self._text()
        r = self.client.post(
            "/v1/memories",
            json={"text": t, "kind": "fact", "visibility": "private" if private else "org"},
            headers=self._h(who, where),
        )
        assert r.status_code == 201, r.text
        m = r.json()
        self.state[where][m["root_id"]] = (t, who, "private" if private else "org")
        self.roots[(where, m["root_id"])] = m["id"]
        if where == "branch":
            self.own.add(m["root_id"])

    @precondition(lambda self: self.state["branch"] is None)
    @rule()
    def fork(self):
        r = self.client.post("/v1/branches", json={"name": "b"}, headers=self.steward.h)
        assert r.status_code == 201, r.text
        self.state["branch"] = dict(self.state["main"])
        for (where, root), id_ in list(self.roots.items()):
            if where == "main":
                self.roots[("branch", root)] = id_

    def _pick(self, where, i):
        """(root, (text, owner, visibility)) of an item in `where`, or None (no branch, no items)."""
        items = self.state[where] or {}
        if not items:
            return None
        root = sorted(items)[i % len(items)]
        return root, items[root]

    @rule(where=WHERE, i=st.integers(0, 50))
    def patch(self, where, i):
        picked = self._pick(where, i)
        if picked is None:
            return
        root, (_, who, vis) = picked
        t = self._text()
        r = self.client.patch(f"/v1/memories/{self.roots[(where, root)]}", json={"text": t}, headers=self._h(who, where))
        assert r.status_code == 200, r.text
        self.state[where][root] = (t, who, vis)
        self.roots[(where, root)] = r.json()["id"]
        if where == "branch":
            self.own.add(root)

    @rule(where=WHERE, i=st.integers(0, 50))
    def delete(self, where, i):
        picked = self._pick(where, i)
        if picked is None:
            return
        root, (_, who, _vis) = picked
        r = self.client.delete(f"/v1/memories/{self.roots[(where, root)]}", headers=self._h(who, where))
        assert r.status_code == 204, r.text
        del self.state[where][root]
        if where == "main" and self.state["branch"] is not None and root not in self.own:
            self.state["branch"].pop(root, None)  # deletion is not history: main's rows are gone

    @invariant()
    def reads_match_the_model(self):
        for where in ("main", "branch"):
            if self.state[where] is None:
                continue
            for who in range(3):
                want = {t for t, owner, vis in self.state[where].values() if vis == "org" or owner == who}
                r = self.client.post(
                    "/v1/search",
                    json={"query": TOKEN, "types": ["memory"], "mode": "text", "k": 100},
                    headers=self._h(who, where),
                )
                assert r.status_code == 200, r.text
                got = {x["text"] for x in r.json()["results"]}
                assert got == want, (where, who, got ^ want)


def test_branch_reads_equal_the_model(client, world):
    BranchMachine.client, BranchMachine.world = client, world
    examples = int(os.environ.get("MEMSCALE_BRANCH_EXAMPLES", "6"))
    run = BranchMachine.TestCase
    run.settings = hsettings(
        max_examples=examples, stateful_step_count=12, deadline=None, suppress_health_check=list(HealthCheck)
    )
    run().runTest()
