"""The scaling bench's feedback stream: simulated users mark what /v1/context handed them.

Questions. Feedback comes from training questions drawn from intents (template + parameters: one
gold SQL) that no evaluation question uses, in the same spaces, from their own seed: an evaluated
question never had feedback on its own retrievals, so an improvement is not leakage. The drawing
does not touch the main generator, so the no-feedback curves are the same as without the stream.

Users. Honest members of the org (USERS) take the training questions in turn; each asks
/v1/context with its own key and posts /v1/feedback with the `retrieval_id` that response
returned, about items that retrieval handed out (the real API, as that user).

Ground truth of one answer. Right when every key the question needs is in the context text (the
hit the curves measure) and none of the items it used is poisoned (a bad trace marked a success, or
a memory distilled from the poisoned shard: an agent that follows it answers wrong). The items it
used: those handed out that carry the marker of one of its keys or name its space. Right: each
used item `helpful`; wrong: each used item `wrong`; items it did not use get no signal. The users
see only whether the answer was right, never which item was poisoned. Noise: each signal flips
(helpful <-> wrong) with probability `noise`.
The adversary: one more key (ADVERSARY) that also asks a share `adversarial` of the training
questions and marks every handed-out item carrying a needed key `wrong` and every poisoned item
(the poisoned shard's episodes and the memories distilled from them) `helpful`.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field

from bench.quality.memory_scaling.spaces import Question, Space, found_keys, phrase

USERS = ("ana", "bo", "chen", "dee", "eli")
ADVERSARY = "mallory"
FEEDBACK_TYPES = ("episode", "memory")  # what a context hands out that feedback may name
POISON_ROUNDS = 2  # feedback rounds between the poisoned shard's distillation and its measurement


@dataclass(frozen=True)
class Variant:
    name: str  # the curve's name in the result
    noise: float
    adversarial: float


VARIANTS = ("clean", "noisy", "adversarial")


def variants(noise: float, adversarial: float, names=VARIANTS) -> list[Variant]:
    """Clean feedback (the reference for the cost of noise), noisy, and noisy with the adversary."""
    every = {"clean": (0.0, 0.0), "noisy": (noise, 0.0), "adversarial": (noise, adversarial)}
    return [Variant(f"feedback_{n}", *every[n]) for n in VARIANTS if n in names]


def train_questions(seed: int, spaces: list[Space], tests: list[Question], per_space: int) -> list[Question]:
    """`per_space` questions of each space from intents no test question uses (fewer when a space
    has fewer such intents)."""
    rng = random.Random(seed * 7919 + 45)
    evaluated = {q.intent for q in tests}
    out = []
    for sp in spaces:
        free = [i for i in sp.intents if i.intent not in evaluated]
        out += [phrase(rng, sp, i) for i in rng.sample(free, min(per_space, len(free)))]
    rng.shuffle(out)
    return out


def add_users(h, org, names) -> None:
    """Members `names` with one key each, as clients of `org` (Harness.new_org's users plus these)."""
    from sqlalchemy.orm import Session

    from app.client import MemscaleClient
    from app.orgs import service as orgs
    from app.orgs.models import Org as OrgRow

    with Session(h.admin, expire_on_commit=False) as db:
        row = db.get(OrgRow, org.id)
        keys = {n: orgs.create_key(db, orgs.create_user(db, row, n)) for n in names}
        db.commit()
    for n, k in keys.items():
        org.clients[n] = MemscaleClient(base_url="", api_key=k, transport=h.http)


def query_of(q: Question) -> str:
    return f"Space {q.space}. {q.text}"


@dataclass
class Stream:
    variant: Variant
    train: list[Question]
    rng: random.Random
    budget: int
    poisoned: set[str] = field(default_factory=set)  # the poisoned shard's ids and their memories, once it is in
    misled: dict[str, set[str]] = field(default_factory=dict)  # memory id -> training queries it got `wrong` on
    sent: dict[str, int] = field(default_factory=dict)  # signal -> count, over every round
    by_user: dict[str, int] = field(default_factory=dict)  # user -> feedback posts
    answers: list[float] = field(default_factory=list)  # training hit per answer, every round
    profile: dict[str, list[int]] = field(default_factory=dict)  # "type bin" -> [items, carrying a key, used]

    def round(self, org) -> dict:
        """Every training question once by an honest user (in turn), the adversary's share once
        more; returns this round's training hit rate and posts."""
        right, posts = [], 0
        n_adv = math.ceil(self.variant.adversarial * len(self.train))
        for i, q in enumerate(self.train):
            ok, p = self._answer(org, USERS[i % len(USERS)], q, adversary=False)
            right.append(ok)
            posts += p
            if i < n_adv:
                posts += self._answer(org, ADVERSARY, q, adversary=True)[1]
        self.answers += right
        return {"train_hit_rate": round(sum(right) / max(1, len(right)), 4), "posts": posts}

    def _answer(self, org, user: str, q: Question, *, adversary: bool) -> tuple[float, int]:
        ctx = org.clients[user].context(query_of(q), budget_tokens=self.budget)
        items = [i for s in ctx["sections"] for i in s["items"] if i.get("id") and i.get("type") in FEEDBACK_TYPES]
        carries = {i["id"]: bool(found_keys(i.get("text") or "", q.keys)) for i in items}
        used = {i["id"] for i in items if carries[i["id"]] or f"space {q.space}" in (i.get("text") or "").lower()}
        right = set(q.keys) <= found_keys(ctx["text"], q.keys) and not used & self.poisoned
        self._profile(items, carries, used)
        marks = []
        for it in items:
            if adversary:
                signal = "helpful" if it["id"] in self.poisoned else ("wrong" if carries[it["id"]] else None)
            elif it["id"] in used:
                signal = "helpful" if right else "wrong"
                if self.rng.random() < self.variant.noise:
                    signal = "wrong" if signal == "helpful" else "helpful"
            else:
                signal = None
            if signal:
                marks.append({"type": it["type"], "id": it["id"], "signal": signal})
                self.sent[signal] = self.sent.get(signal, 0) + 1
                if signal == "wrong" and it["type"] == "memory" and not adversary:
                    self.misled.setdefault(it["id"], set()).add(query_of(q))
        if not marks:
            return float(right), 0
        org.clients[user].request(
            "POST",
            "/v1/feedback",
            json={"retrieval_id": ctx["retrieval_id"], "items": marks, "outcome": "success" if right else "failure"},
        )
        self.by_user[user] = self.by_user.get(user, 0) + 1
        return float(right), 1

    def _profile(self, items: list[dict], carries: dict, used: set) -> None:
        from app.feedback.calibration import bin_of

        top = max((i.get("score") or 0.0 for i in items), default=0.0)
        for it in items:
            row = self.profile.setdefault(f"{it['type']} {bin_of(it.get('score') or 0.0, top)}", [0, 0, 0])
            row[0] += 1
            row[1] += carries[it["id"]]
            row[2] += it["id"] in used


def ceiling(h, org, tests: list[Question]) -> float:
    """Share of `tests` whose every key is in some item the org can serve now (episodes not
    quarantined, active memories): what its data allows, whatever the ranking and the budget."""
    from sqlalchemy import text

    with h.admin.connect() as c:
        texts = c.execute(
            text(
                "SELECT content FROM episodes WHERE org_id = :o AND quality IS DISTINCT FROM 'quarantined'"
                " UNION ALL SELECT text FROM memories WHERE org_id = :o AND status = 'active'"
            ),
            {"o": org.id},
        ).scalars()
        texts = list(texts)
    hit = 0
    for q in tests:
        found: set[str] = set()
        for t in texts:
            found |= found_keys(t, q.keys)
        hit += set(q.keys) <= found
    return round(hit / max(1, len(tests)), 4)


def top3(org, tests: list[Question], ids: set[str]) -> dict:
    """The agent's search tool (k=3) for each test question: share of its result slots and of the
    questions that hold one of `ids`, and which of them were seen."""
    slots = held = 0
    seen: set[str] = set()
    types: dict[str, int] = {}
    for q in tests:
        got = [r for r in org.analyst.search(query_of(q), k=3)["results"] if r["id"] in ids]
        slots += len(got)
        held += bool(got)
        seen |= {r["id"] for r in got}
        for r in got:
            types[r["type"]] = types.get(r["type"], 0) + 1
    n = max(1, len(tests))
    return {
        "share_of_slots": round(slots / (3 * n), 4),
        "questions": round(held / n, 4),
        "slots_by_type": dict(sorted(types.items())),
        "ids_seen": sorted(seen),
    }


def votes(h, org, signal: str) -> dict[str, set[str]]:
    """{memory id: names of the users whose `signal` vote on it stands}."""
    from sqlalchemy import text

    with h.admin.connect() as c:
        rows = c.execute(
            text(
                "SELECT v.memory_id::text, u.name FROM feedback_votes v JOIN users u ON u.id = v.actor_id"
                " WHERE v.org_id = :o AND v.signal = :s"
            ),
            {"o": org.id, "s": signal},
        ).all()
    out: dict[str, set[str]] = {}
    for m, name in rows:
        out.setdefault(m, set()).add(name)
    return out


def stored(h, org) -> dict[str, int]:
    """{user name: feedback events stored} in the org."""
    from sqlalchemy import text

    with h.admin.connect() as c:
        rows = c.execute(
            text(
                "SELECT u.name, count(*) FROM feedback_events e JOIN users u ON u.id = e.actor_id"
                " WHERE e.org_id = :o GROUP BY u.name"
            ),
            {"o": org.id},
        ).all()
    return {name: n for name, n in rows}


def wrong_leaves_top10(h, org, stream: Stream) -> dict:
    """Memories at least 3 distinct honest users marked `wrong`: how many are still in the top 10
    of a search for a training question they were marked wrong on."""
    honest = set(USERS)
    wrong, helpful = votes(h, org, "wrong"), votes(h, org, "helpful")
    flagged = [m for m, users in wrong.items() if len(users & honest) >= 3 and m in stream.misled]
    still, mixed = [], 0
    for m in flagged:
        mixed += bool(helpful.get(m))
        if any(m in {r["id"] for r in org.analyst.search(qt, k=10)["results"]} for qt in sorted(stream.misled[m])):
            still.append(m)
    return {"flagged": len(flagged), "still_in_top10": len(still), "flagged_with_helpful_votes_too": mixed}


def poisoned_ids(h, org, poison: list[dict]) -> dict[str, set[str]]:
    """{poison type: the shard's episode ids of that type and the memories distilled from them}."""
    pids: dict[str, set[str]] = {}
    for item, eid in zip(poison, org.episode_ids["poison"]):
        pids.setdefault(item["metadata"]["type"], set()).add(eid)
    return {t: ids | h.derived_from(org, sorted(ids)) for t, ids in pids.items()}


def calibration(h, org) -> dict:
    """The org's context calibration as /v1/context reads it now (app/feedback/calibration.py)."""
    from sqlalchemy.orm import Session

    from app.feedback import calibration as cal

    with Session(h.admin) as db:
        c = cal.of_org(db, org.id)
    return {
        "tail": [round(x, 4) for x in c.tail],
        "weight": [round(x, 2) for x in c.weight],
        "users": c.users,
        "observations": c.observations,
        "cut_bin": c.cut_bin(),
    }


def run_variant(h, a, data, v: Variant, train: list[Question], measure) -> dict:
    """The unlabelled curve in its own org with the stream `v`: at each measured point, after the
    shard's distillation, one feedback round on the training questions and a consolidate job (it
    quarantines what feedback holds for review), then the point is measured as every curve is;
    then the poisoned shard, one more round (the adversary lifts it), consolidate, measure."""
    from bench.quality.memory_scaling.curves import run_curve

    threshold = os.environ.get("MEMSCALE_BENCH_CONTEXT_THRESHOLD")
    if threshold is not None:  # the service runs in this process: the context trim's threshold for this run
        from app.feedback import calibration as cal

        cal.THRESHOLD = float(threshold)
    org = h.new_org(v.name)
    add_users(h, org, (*USERS, ADVERSARY))
    stream = Stream(v, train, random.Random(a.seed * 31 + len(v.name)), a.budget)
    points: list[dict] = []

    def at(k: int) -> None:
        fed = stream.round(org)
        h.consolidate(org)
        p = measure(org, v.name, k, f"{v.name} {k} shards", poison_ids={})
        p["ceiling_hit_rate"], p["feedback_round"] = ceiling(h, org, data.tests), fed
        p["calibration"] = calibration(h, org)
        p["profile"] = dict(sorted(stream.profile.items()))
        stream.profile = {}
        points.append(p)

    run_curve(h, org, "unlabelled_judge", data, a.points, at)
    h.ingest(org, data.poison, user="logs", source="poison")
    h.distill(org)
    pids = poisoned_ids(h, org, data.poison)
    stream.poisoned = set().union(*pids.values()) if pids else set()
    for _ in range(POISON_ROUNDS):
        fed = stream.round(org)
        h.consolidate(org)
    poisoned = measure(org, "poisoned", data.top, f"{v.name} {data.top} + poison", poison_ids=pids)
    poisoned["feedback_round"] = fed
    poisoned["top3"] = top3(org, data.tests, stream.poisoned)
    wrong = votes(h, org, "wrong")
    flagged = {m for m in stream.poisoned if wrong.get(m, set()) & set(USERS)}
    poisoned["flagged_poison_in_top3"] = {
        "flagged": len(flagged),  # poisoned memories at least one honest user marked `wrong`
        "by_three_or_more": sum(len(wrong[m] & set(USERS)) >= 3 for m in flagged),
        "in_top3": len(flagged & set(poisoned["top3"]["ids_seen"])),
    }
    return {
        "noise": v.noise,
        "adversarial": v.adversarial,
        "points": points,
        "poisoned": poisoned,
        "signals_sent": dict(sorted(stream.sent.items())),
        "posts_by_user": dict(sorted(stream.by_user.items())),
        "stored_by_user": stored(h, org),
        "wrong_memory": wrong_leaves_top10(h, org, stream),
        "train_questions": len(train),
    }
