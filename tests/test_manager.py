"""The memory manager (app/manager/): the rules policy reproduces today's decisions, training on
recorded decisions gives a versioned policy with its training data recorded, the pipelines use an
active policy and fall back to the rules otherwise, only stewards and admins start the job, one
org's decisions never train another's policy, and a forgotten user's decisions go."""

from __future__ import annotations

import hashlib
import itertools
import json
import uuid
from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.feedback import repository as feedback_repo
from app.llm.fake import FakeGateway
from app.manager import repository as repo
from app.manager import service as manager
from app.manager.features import NAMES, Candidate, Neighbour, features
from app.manager.policy import DROP, MERGE, NEW, RULES, SUPERSEDE, LearnedPolicy
from app.manager.residual import ResidualPolicy
from app.memories.near_duplicates import CONFLICT_SIMILARITY, DUPLICATE_SIMILARITY, clusters, repeats_stored
from pipelines.consolidation.decide import Group, decide_group
from pipelines.consolidation.rules import Item, contradicts, winner


def _old_consolidation(items: list[Item], duplicate: float, conflict: float) -> list[tuple]:
    """The consolidation decisions as the job took them before the manager existed (verbatim)."""
    decisions, dup_ids = [], set()
    for comp in clusters([i.vec for i in items], duplicate):
        members = [items[i] for i in comp]
        w = winner(members)
        for loser in members:
            if loser is not w:
                decisions.append(("supersedes" if contradicts(w.text, loser.text) else "merged_from", w.id, loser.id))
                dup_ids.add(loser.id)
    rest = [i for i in items if i.id not in dup_ids]
    for comp in clusters([i.vec for i in rest], conflict):
        members = [rest[i] for i in comp]
        for a_i, a in enumerate(members):
            for b in members[a_i + 1 :]:
                if a.id in dup_ids or b.id in dup_ids or not contradicts(a.text, b.text):
                    continue
                w = winner([a, b])
                decisions.append(("supersedes", w.id, (b if w is a else a).id))
                dup_ids.add((b if w is a else a).id)
    return decisions


TEXTS = [
    "Production deploys require two approvals.",
    "Production deploys require two approvals!",
    "Production deploys need two approvals from the platform team.",
    "Production deploys require three approvals.",
    "The on-call rotation changes on Monday.",
    "The on-call rotation changes on Wednesday.",
    "The on-call rotation is published in the ops calendar.",
    "Always use the VPN for the admin panel.",
    "Never use the VPN for the admin panel.",
    "The retention window is 30 days.",
    "The retention window is 90 days.",
    "Invoices are due within 30 days.",
    "The user prefers concise answers with code samples.",
    "The user prefers short answers with code examples.",
]


def test_the_rules_policy_reproduces_todays_consolidation_and_distillation(embedder, admin_engine, world):
    org_id = world.orgs[world.org()]
    vecs = np.asarray(embedder.embed(TEXTS), dtype=np.float32)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rng = np.random.default_rng(7)
    seen = set()
    with Session(admin_engine) as db:
        for trial in range(4):
            order = rng.permutation(len(TEXTS))
            items = [
                Item(
                    uuid.uuid4(),
                    TEXTS[k],
                    vecs[k],
                    float(rng.uniform(0.5, 1)),
                    t0.replace(day=1 + int(rng.integers(0, 27))),
                    int(rng.integers(0, 3)),
                )
                for k in order
            ]
            mems = {i.id: type("M", (), {"kind": "rule", "visibility": "org", "owner_id": None})() for i in items}
            for dup, conf in ((DUPLICATE_SIMILARITY, CONFLICT_SIMILARITY), (0.85, 0.6), (0.97, 0.8)):
                got = decide_group(db, org_id, Group(items, mems, {}), RULES, duplicate=dup, conflict=conf)
                want = _old_consolidation(items, dup, conf)
                assert [(r, w.id, loser.id) for r, w, loser, _ in got] == want, (trial, dup, conf)
                assert all(d[0] == d[1] for *_, d in got)  # taken by the rules: action == rules' action
                seen |= {r for r, *_ in got}
    assert seen == {"merged_from", "supersedes"}  # both cases are exercised
    # Distillation: merge (confirm the nearest memory) exactly when the near-duplicate rule says it repeats.
    for (a, va), (b, vb) in itertools.product(zip(TEXTS, vecs), repeat=2):
        distance = 1.0 - float(va @ vb)
        c = Candidate(
            "distill",
            b,
            "rule",
            "org",
            0.8,
            1,
            t0,
            repeats_stored(a, distance, b),
            contradicts(a, b),
            (Neighbour(None, a, 1 - distance),),
        )
        assert RULES.decide(features(c)) == (MERGE if repeats_stored(a, distance, b) else NEW)


def _fake() -> FakeGateway:
    return FakeGateway(default=json.dumps({"score": 0.9, "useful": 1, "suspicious": 0, "reason": "ok", "memories": []}))


def distilled(text_: str, neighbour_cos: float) -> dict:
    """The features of a distilled org fact with one stored neighbour at `neighbour_cos`."""
    return features(
        Candidate("distill", text_, "fact", "org", 0.8, 1, None, False, False, (Neighbour(None, "x", neighbour_cos),))
    )


def record(
    admin_engine,
    org_id,
    voters,
    *,
    n: int = 80,
    prefix: str = "conv",
    wrong_from: float = 0.5,
    statement: str = "Statement number {k} about the service.",
) -> list[uuid.UUID]:
    """n distilled decisions (stored as new) from n/2 conversations; a memory whose neighbour was
    close (cos >= wrong_from) was later found wrong by the voters, the others helpful."""
    ids = []
    with Session(admin_engine) as db:
        for k in range(n):
            cos = (k % 10) / 10
            mid = uuid.uuid4()
            manager.record_decision(
                db,
                org_id=org_id,
                decision=(NEW, NEW, distilled(statement.format(k=k), cos)),
                policy=RULES,
                memory_id=mid,
                neighbour_id=None,
                source=f"{prefix}-{k // 2}",
                owner_id=voters[0].user_id,
                job_id=None,
            )
            for v in voters:
                signal = "wrong" if cos >= wrong_from else "helpful"
                feedback_repo.vote(
                    db, org_id=org_id, memory_id=mid, actor_id=v.user_id, signal=signal, at=datetime.now(UTC), replaces=None
                )
            ids.append(mid)
        db.commit()
    return ids


def _decision_ids(admin_engine, org_id) -> list[str]:
    with admin_engine.connect() as c:
        return [str(i) for i in c.execute(text("SELECT id FROM manager_decisions WHERE org_id = :o"), {"o": org_id}).scalars()]


def test_training_gives_a_versioned_policy_with_its_training_data_recorded(client, world, admin_engine, run_job):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    steward = world.user(org, roles=["steward"])
    member = world.user(org)
    with Session(admin_engine) as db:  # a handful of decisions: a version, but never active
        few = manager.train(db, alice.org_id, actor_id=None, job_id=None)
        db.commit()
    assert (few["version"], few["status"], few["labelled"]) == (1, "inactive", 0)
    record(admin_engine, alice.org_id, [alice, bob])
    # Only stewards and admins start the job; a member is refused and nothing is queued.
    assert client.post("/v1/jobs", json={"kind": "train_manager"}, headers=member.h).status_code == 403
    assert client.post("/v1/jobs", json={"kind": "train_manager", "params": {"x": 1}}, headers=steward.h).status_code == 422
    assert client.post("/v1/jobs", json={"kind": "train_manager"}, headers=steward.h).status_code == 202
    job = run_job(alice.org_id, "train_manager", {}, created_by=steward.user_id)
    assert job.status == "succeeded", job.error
    assert (job.stats["version"], job.stats["status"], job.stats["labelled"]) == (2, "active", 80), job.stats
    with Session(admin_engine) as db:
        vs = manager.versions(db, alice.org_id)
        policy = manager.policy_for(db, alice.org_id)
    assert [(v["version"], v["status"]) for v in vs] == [(1, "inactive"), (2, "active")]
    v2 = vs[1]
    ids = sorted(_decision_ids(admin_engine, alice.org_id))
    assert v2["training"]["count"] == 80 and v2["training"]["sha256"] == hashlib.sha256("\n".join(ids).encode()).hexdigest()
    assert v2["training"]["heldout"] + v2["training"]["train"] == 80 and v2["training"]["heldout"] >= 5
    m = v2["metrics"]
    assert m["beats_rules"] and m["learned"]["reward"] > m["rules"]["reward"], m
    # held out by source: each conversation's two decisions are on the same side
    assert (
        v2["training"]["heldout"]
        == 2 * v2["training"]["heldout_sources"]
        == 2 * sum(manager.heldout(f"conv-{k}") for k in range(40))
    )
    assert isinstance(policy, ResidualPolicy) and policy.version == 2
    assert (
        policy.decide(distilled("Statement number 1 about the service.", 0.9)) == DROP
        and policy.decide(distilled("Statement number 1 about the service.", 0.1)) == NEW
    )
    with admin_engine.connect() as c:
        audit = (
            c.execute(
                text("SELECT details FROM audit_log WHERE org_id = :o AND action = 'manager.train' ORDER BY at"),
                {"o": alice.org_id},
            )
            .scalars()
            .all()
        )
    assert [a["version"] for a in audit] == [1, 2] and audit[1]["training"]["sha256"] == v2["training"]["sha256"]


def _policy(admin_engine, org_id, models: dict) -> None:
    """An active policy with hand-set models (every feature weight 0: each action's value is its intercept's)."""
    n = len(NAMES)
    weights = {
        "names": list(NAMES),
        "mean": [0.0] * n,
        "scale": [1.0] * n,
        "models": {a: {"w": [0.0] * n, "b": b} for a, b in models.items()},
    }
    with Session(admin_engine) as db:
        repo.set_status(db, org_id, was="active", now="inactive")
        repo.add_policy(
            db,
            org_id=org_id,
            version=repo.next_version(db, org_id),
            status="active",
            weights=weights,
            metrics={},
            training={"count": 0},
        )
        db.commit()


def _retire(admin_engine, org_id) -> None:
    with Session(admin_engine) as db:
        repo.set_status(db, org_id, was="active", now="retired")
        db.commit()


def _post(client, actor, content, **kw):
    r = client.post("/v1/episodes", json={"kind": "conversation", "content": content, **kw}, headers=actor.h)
    assert r.status_code == 201, r.text


def _mem(client, actor, text_, **kw):
    r = client.post("/v1/memories", json={"text": text_, "kind": "rule", **kw}, headers=actor.h)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_distillation_uses_the_active_policy_and_falls_back_to_the_rules(client, world, run_job, admin_engine):
    org = world.org()
    alice = world.user(org)
    _policy(admin_engine, alice.org_id, {NEW: -8.0})  # storing anything new is worth ~ -1: drop it
    _post(client, alice, "I prefer concise answers with code samples.")
    job = run_job(alice.org_id, "distill", {"min_age_s": 0}, gateway=_fake())
    assert job.status == "succeeded", job.error
    assert job.stats["memories_created"] == 0 and job.stats["dropped_by_manager"] >= 1, job.stats
    with admin_engine.connect() as c:
        rows = c.execute(
            text("SELECT action, rules_action, policy_version, memory_id, features FROM manager_decisions WHERE org_id = :o"),
            {"o": alice.org_id},
        ).all()
    assert rows and all((r[0], r[1], r[2], r[3]) == (DROP, NEW, 1, None) for r in rows)
    assert set(rows[0][4]) == set(NAMES)
    _retire(admin_engine, alice.org_id)  # no active policy: the rules again
    _post(client, alice, "Always deploy from the release branch, never from main.")
    job = run_job(alice.org_id, "distill", {"min_age_s": 0}, gateway=_fake())
    assert job.stats["memories_created"] >= 1 and "dropped_by_manager" not in job.stats, job.stats
    with admin_engine.connect() as c:
        last = c.execute(
            text("SELECT action, rules_action, policy_version FROM manager_decisions WHERE org_id = :o AND job_id = :j"),
            {"o": alice.org_id, "j": job.id},
        ).all()
    assert last and all(r == (NEW, NEW, None) for r in last)
    # A policy that finds superseding the nearest memory worth more: the new statement replaces it.
    _policy(admin_engine, alice.org_id, {NEW: -8.0, MERGE: -8.0, SUPERSEDE: 8.0})
    _post(client, alice, "Always deploy from the release branch after the smoke tests pass.")
    job = run_job(alice.org_id, "distill", {"min_age_s": 0}, gateway=_fake())
    assert job.status == "succeeded" and job.stats["memories_created"] >= 1, job.stats
    with admin_engine.connect() as c:
        sup = c.execute(
            text("SELECT count(*) FROM lineage_edges WHERE org_id = :o AND job_id = :j AND relation = 'supersedes'"),
            {"o": alice.org_id, "j": job.id},
        ).scalar()
        acts = c.execute(
            text("SELECT action, policy_version FROM manager_decisions WHERE org_id = :o AND job_id = :j"),
            {"o": alice.org_id, "j": job.id},
        ).all()
    assert sup >= 1 and acts and all(a == (SUPERSEDE, 2) for a in acts)


def test_consolidation_uses_the_active_policy_and_falls_back_to_the_rules(client, world, run_job, admin_engine):
    org = world.org()
    alice = world.user(org)
    _mem(client, alice, "Production deploys require two approvals.", visibility="org")
    _mem(client, alice, "Production deploys require two approvals!", visibility="org")
    _mem(client, alice, "The on-call rotation changes on Monday.", visibility="org")
    _mem(client, alice, "The on-call rotation changes on Wednesday.", visibility="org")
    _policy(admin_engine, alice.org_id, {MERGE: -8.0, NEW: 8.0})  # keeping both is worth more than merging
    job = run_job(alice.org_id, "consolidate", {})
    assert (job.stats["merged"], job.stats["superseded"]) == (0, 0), job.stats
    _retire(admin_engine, alice.org_id)
    job = run_job(alice.org_id, "consolidate", {})
    assert (job.stats["merged"], job.stats["superseded"]) == (1, 1), job.stats
    with admin_engine.connect() as c:
        rows = c.execute(
            text("SELECT action, rules_action, policy_version FROM manager_decisions WHERE org_id = :o ORDER BY action"),
            {"o": alice.org_id},
        ).all()
    assert rows == [(MERGE, MERGE, None), (SUPERSEDE, SUPERSEDE, None)]


def test_one_orgs_decisions_never_train_anothers_policy(world, admin_engine, app):
    from app.kit.database.db import bind_principal

    a, b = world.org(), world.org()
    a1, a2 = world.user(a), world.user(a)
    b1, b2 = world.user(b), world.user(b)
    mids = record(admin_engine, a1.org_id, [a1, a2])
    with Session(admin_engine) as db:  # org b's users vote on the same ids, in org b
        for mid, v in itertools.product(mids, (b1, b2)):
            feedback_repo.vote(
                db, org_id=b1.org_id, memory_id=mid, actor_id=v.user_id, signal="helpful", at=datetime.now(UTC), replaces=None
            )
        db.commit()
    with app.state.sessions() as db:  # under row-level security, bound to org b
        bind_principal(db, None, org_id=b1.org_id, all_scopes=True)
        assert repo.decisions(db, a1.org_id, 100) == []
        got = manager.train(db, b1.org_id, actor_id=None, job_id=None)
        assert isinstance(manager.policy_for(db, b1.org_id), type(RULES))
        db.commit()
    assert (got["labelled"], got["status"]) == (0, "inactive")
    with app.state.sessions() as db:
        bind_principal(db, None, org_id=a1.org_id, all_scopes=True)
        got = manager.train(db, a1.org_id, actor_id=None, job_id=None)
        db.commit()
    assert (got["labelled"], got["status"]) == (80, "active")  # org b's votes moved nothing
    with Session(admin_engine) as db:
        assert [v["training"]["count"] for v in manager.versions(db, b1.org_id)] == [0]


def test_a_forgotten_users_decisions_go_and_the_policy_trained_on_them_retires(client, world, admin_engine):
    org = world.org()
    alice, bob = world.user(org), world.user(org)
    admin = world.user(org, roles=["admin"])
    record(admin_engine, alice.org_id, [alice, bob])
    with Session(admin_engine) as db:
        assert manager.train(db, alice.org_id, actor_id=None, job_id=None)["status"] == "active"
        db.commit()
    assert client.delete(f"/v1/users/{alice.user_id}/data", headers=admin.h).status_code == 202
    assert _decision_ids(admin_engine, alice.org_id) == []
    with Session(admin_engine) as db:
        assert manager.policy_for(db, alice.org_id) is RULES
        assert [v["status"] for v in manager.versions(db, alice.org_id)] == ["retired"]


@pytest.mark.parametrize("cos", [0.0, 0.95])
def test_a_policy_without_a_model_for_an_action_never_takes_it(cos):
    n = len(NAMES)
    p = LearnedPolicy({"names": list(NAMES), "mean": [0.0] * n, "scale": [1.0] * n, "models": {}})
    f = distilled("Statement number 1 about the service.", cos)
    assert p.decide(f) == RULES.decide(f) == NEW


def test_admin_train_manager_cli_stores_a_version(settings, world, admin_engine):
    import os
    import subprocess
    import sys

    org = world.org()
    alice, bob = world.user(org), world.user(org)
    record(admin_engine, alice.org_id, [alice, bob])
    env = {**os.environ, "MEMSCALE_DATABASE_URL": settings.database_url}
    r = subprocess.run(
        [sys.executable, "-m", "app", "admin", "train-manager", "--org", org],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["version"], out["status"], out["labelled"]) == (1, "active", 80)
    bad = subprocess.run(
        [sys.executable, "-m", "app", "admin", "train-manager", "--org", "no-such-org"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stdout == ""


def three_turns(texts: list[str], evidence: str):
    """A LoCoMo conversation "c" of three turns D1:1-3 (each text starts with its speaker), a
    question on the dog's name whose evidence is `evidence`, and one whose evidence is nowhere."""
    from bench.quality.locomo.data import QA, Conversation, Turn

    t = datetime(2026, 1, 1)
    turns = [Turn(f"D1:{i + 1}", x.split(":")[0], x, t, 1) for i, x in enumerate(texts)]
    return Conversation(
        "c", turns, [QA("What is the dog's name?", "Rex", 1, [evidence]), QA("Where does B live?", "Oslo", 1, ["D9:9"])]
    )


def test_the_bench_rewards_what_served_a_questions_evidence():
    """bench/quality/manager.py on a three-turn conversation with unit vectors: a repeated turn is
    merged, the memory holding the evidence is rewarded, the one that crowded a failed question is not."""
    from bench.quality.manager import play, rows, score, summary

    conv = three_turns(
        ["A: I adopted a dog named Rex.", "A: I adopted a dog named Rex.", "B: The weather is grey today."], "D1:2"
    )
    e = np.eye(3, dtype=np.float32)
    played = play(conv, np.stack([e[0], e[0], e[1]]), RULES)
    assert [d[1] for d in played.decisions] == [NEW, MERGE, NEW] and len(played.mems) == 2
    score(conv, np.stack([e[0], e[2]]), played, 1, 1.0)
    assert played.hits == 1 and played.rewards == {0: 1.0}  # the failed question was served memory 0, which helped once
    assert [r.reward for r in rows(played)] == [1.0, 1.0] and summary(played)["memories"] == 2


def test_a_decisions_reward_reads_used_with_success_and_one_user_moves_it_by_a_bounded_amount(client, world, admin_engine):
    from app.feedback.service import ONE_USER_BOUND

    org = world.org()
    alice, mallory = world.user(org), world.user(org)
    m = _mem(client, alice, "Backups are kept for 35 days in the eu-west bucket.", visibility="org")
    rid = client.post("/v1/search", json={"query": "how long are backups kept?"}, headers=alice.h).json()["retrieval_id"]
    item = [{"type": "memory", "id": m, "signal": "used"}]
    assert (
        client.post("/v1/feedback", json={"retrieval_id": rid, "items": item, "outcome": "success"}, headers=alice.h).status_code
        == 201
    )
    with Session(admin_engine) as db:
        before = manager.rewards(db, alice.org_id, [m])[m][0]
    assert before == pytest.approx(2 * (2 / 3) - 1)  # one distinct user: Beta mean 2/3
    for _ in range(5):  # one key flooding `wrong` (and `outdated`) counts once per signal
        rid = client.post("/v1/search", json={"query": "how long are backups kept?"}, headers=mallory.h).json()["retrieval_id"]
        items = [{"type": "memory", "id": m, "signal": s} for s in ("wrong", "outdated")]
        assert client.post("/v1/feedback", json={"retrieval_id": rid, "items": items}, headers=mallory.h).status_code == 201
    with Session(admin_engine) as db:
        after = manager.rewards(db, alice.org_id, [m]).get(m, (0.0, 0.0))[0]
    assert 0 <= before - after <= 2 * (2 * ONE_USER_BOUND) + 1e-9  # two signals, each within the utility's bound
