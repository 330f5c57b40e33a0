"""Consolidation's decisions within one scope group, asked of the memory manager (app/manager/).

Which pairs are asked is the rules' structure: each member of a near-duplicate cluster against
the cluster's winner, then each pair of a conflict cluster (same subject) not yet decided, the
newer and better-sourced one winning (rules.winner). The action for a pair (the loser kept, merged
into the winner or superseded by it) is the policy's, from the loser's features: its winner and
its next nearest members of the group, their utility and sources. Under the rules a pair that
changes nothing is never turned into features (a group's conflict clusters can hold many pairs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.manager import service as manager
from app.manager.features import CONSOLIDATE, Candidate, Neighbour
from app.manager.policy import MERGE, NEW, RULES, SUPERSEDE
from app.memories.near_duplicates import clusters
from pipelines.consolidation.rules import Item, contradicts, winner

RELATION = {MERGE: "merged_from", SUPERSEDE: "supersedes"}


@dataclass
class Group:
    """One scope group: its items, their memories (kind, visibility) and distilled sources."""

    items: list[Item]
    memories: dict  # id -> Memory
    sources: dict  # id -> [(type, id)] distilled_from edges
    utility: dict | None = None  # read once, for the group's ids, when a learned policy asks
    _sim: np.ndarray | None = field(default=None, repr=False)

    def sim(self) -> np.ndarray:
        if self._sim is None:
            m = np.stack([i.vec for i in self.items])
            self._sim = m @ m.T
        return self._sim


def _candidate(db, org_id, g: Group, loser: Item, w: Item, *, repeats: bool, conflicts: bool) -> Candidate:
    if g.utility is None:
        g.utility = manager.neighbour_utilities(db, org_id, [i.id for i in g.items])
    pos = {i.id: k for k, i in enumerate(g.items)}
    row = g.sim()[pos[loser.id]]
    others = sorted((k for k in range(len(g.items)) if g.items[k].id not in (loser.id, w.id)), key=lambda k: -row[k])[:2]

    def nb(i: Item) -> Neighbour:
        return Neighbour(i.id, i.text, float(row[pos[i.id]]), i.n_sources, g.utility.get(str(i.id)), i.recorded_at)

    m = g.memories[loser.id]
    return Candidate(
        stage=CONSOLIDATE,
        text=loser.text,
        kind=m.kind,
        visibility=m.visibility,
        confidence=float(loser.confidence),
        n_sources=loser.n_sources,
        recorded_at=loser.recorded_at,
        repeats=repeats,
        conflicts=conflicts,
        neighbours=(nb(w), *(nb(g.items[k]) for k in others)),
    )


def decide_group(db, org_id, g: Group, policy, *, duplicate: float, conflict: float) -> list[tuple]:
    """[(relation, winner, loser, decision)] for one group: what to merge and supersede."""
    out: list[tuple] = []
    done: set = set()

    def ask(loser: Item, w: Item, *, repeats: bool, conflicts: bool) -> None:
        flags = {"stage_consolidate": 1.0, "repeats": float(repeats), "conflicts": float(conflicts)}
        if policy is RULES and RULES.decide(flags) == NEW:
            return
        decision = manager.decide(policy, _candidate(db, org_id, g, loser, w, repeats=repeats, conflicts=conflicts))
        if decision[0] in RELATION:
            out.append((RELATION[decision[0]], w, loser, decision))
            done.add(loser.id)

    for comp in clusters([i.vec for i in g.items], duplicate):
        members = [g.items[i] for i in comp]
        w = winner(members)
        for loser in members:
            if loser is not w:
                # Near-identical wording can still disagree ("on Monday" / "on Wednesday").
                ask(loser, w, repeats=True, conflicts=contradicts(w.text, loser.text))
    rest = [i for i in g.items if i.id not in done]
    for comp in clusters([i.vec for i in rest], conflict):
        members = [rest[i] for i in comp]
        for a_i, a in enumerate(members):
            for b in members[a_i + 1 :]:
                if a.id in done or b.id in done:
                    continue
                w = winner([a, b])
                ask(b if w is a else a, w, repeats=False, conflicts=contradicts(a.text, b.text))
    return out


def source_of(g: Group, loser: Item) -> str:
    """The unit of the held-out split: the loser's first distilled source, else the memory itself."""
    edges = g.sources.get(loser.id) or []
    return str(edges[0][1]) if edges else str(loser.id)
