"""The residual memory manager (app/manager/residual.py): it decides exactly as the rules where its
model is not confident, deviates only by dropping a statement the rules would store as new,
chooses its threshold on held-out folds (never one that did worse than the rules there), is what
training stores and loads, trains on its own org's decisions only, and is activated only when it
beat the rules on held-out sources."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import numpy as np
from sqlalchemy.orm import Session

from app.manager import residual
from app.manager import service as manager
from app.manager.features import NAMES, Candidate, Neighbour, features
from app.manager.policy import DROP, MERGE, NEW, RULES, SUPERSEDE, Row
from app.memories.near_duplicates import repeats_stored
from pipelines.consolidation.rules import contradicts
from tests.test_manager import distilled, record

TEXTS = [
    "Production deploys require two approvals.",
    "Production deploys require two approvals!",
    "Production deploys require three approvals.",
    "The on-call rotation changes on Monday.",
    "Always use the VPN for the admin panel.",
    "Never use the VPN for the admin panel.",
    "The retention window is 30 days.",
    "ok",
    "Thanks!",
    "The user prefers short answers with code examples.",
]

STATEMENT = "Statement {k} about the service."


def _candidates(embedder) -> list[dict]:
    """Features of every (neighbour, statement) pair of TEXTS in both stages, and of each
    statement with no neighbour."""
    vecs = np.asarray(embedder.embed(TEXTS), dtype=np.float32)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for stage, ((a, va), (b, vb)) in itertools.product(("distill", "consolidate"), itertools.product(zip(TEXTS, vecs), repeat=2)):
        d = 1.0 - float(va @ vb)
        nb = (Neighbour(None, a, 1 - d),)
        out.append(features(Candidate(stage, b, "fact", "org", 0.8, 1, t0, repeats_stored(a, d, b), contradicts(a, b), nb)))
    out += [features(Candidate("distill", b, "fact", "org", 0.8, 1, t0, False, False, ())) for b in TEXTS]
    return out


def _weights(bias: float, *, threshold: float, on: str = "log_words", w: float = 0.0) -> dict:
    """Hand-set residual weights: P(helped) = sigmoid(bias + w * feature `on`)."""
    n = len(NAMES)
    coef = [w if name == on else 0.0 for name in NAMES]
    return {
        "kind": residual.RESIDUAL,
        "names": list(NAMES),
        "mean": [0.0] * n,
        "scale": [1.0] * n,
        "w": coef,
        "b": bias,
        "threshold": threshold,
    }


def test_the_residual_policy_is_the_rules_where_it_is_not_confident(embedder):
    cands = _candidates(embedder)
    assert {RULES.decide(f) for f in cands} >= {NEW, MERGE, SUPERSEDE}  # every rule action is exercised
    # Threshold 0, or a model that never falls below the threshold: the rules' action everywhere.
    for p in (residual.ResidualPolicy(_weights(-20.0, threshold=0.0)), residual.ResidualPolicy(_weights(2.0, threshold=0.5))):
        assert [p.decide(f) for f in cands] == [RULES.decide(f) for f in cands]
    # A model confident that short statements never help: it drops exactly those the rules would
    # store as new next to a neighbour in distillation, and nothing else changes.
    p = residual.ResidualPolicy(_weights(6.0, threshold=0.5, w=-4.0))  # P(helped) < 0.5 iff log_words > 1.5
    changed = 0
    for f in cands:
        confident = f["log_words"] > 1.5
        if RULES.decide(f) == NEW and not f["stage_consolidate"] and not f["no_neighbour"] and confident:
            assert p.decide(f) == DROP
            changed += 1
        else:
            assert p.decide(f) == RULES.decide(f), f
    assert changed > 0 and changed < sum(RULES.decide(f) == NEW for f in cands)
    # The stored weights load back as this policy.
    loaded = manager.load(_weights(6.0, threshold=0.5, w=-4.0), version=3)
    assert isinstance(loaded, residual.ResidualPolicy) and loaded.version == 3
    assert [loaded.decide(f) for f in cands] == [p.decide(f) for f in cands]


def test_the_threshold_is_the_best_on_held_out_folds_and_never_worse_than_the_rules():
    # Quality per threshold on two folds: dropping at 0.1 gains, at 0.2 it loses.
    quality = {0.0: 10.0, 0.1: 12.0, 0.2: 9.0}
    t, table = residual.choose_threshold([0, 1], lambda k, t: (quality[t] / 2, 100 - 100 * t), (0.1, 0.2))
    assert t == 0.1 and [r["threshold"] for r in table] == [0.0, 0.1, 0.2]
    # Every deviation loses on held-out folds: the rules (threshold 0).
    t, _ = residual.choose_threshold([0, 1], lambda k, t: (5.0 - t, 100 - 100 * t), (0.1, 0.2))
    assert t == 0.0
    # A tie with the rules at fewer memories: the smaller store.
    t, _ = residual.choose_threshold([0], lambda k, t: (5.0, 100 - 100 * t), (0.1, 0.2))
    assert t == 0.2


def test_fitting_learns_which_statements_never_help():
    f_short = distilled("ok thanks", 0.3)
    f_long = distilled("The nightly backup of the billing database runs at 02:00 UTC and keeps 35 days.", 0.3)
    rows = [Row(f_short, NEW, 0.0)] * 30 + [Row(f_long, NEW, 1.0)] * 30 + [Row(f_long, MERGE, -1.0)] * 50
    w = residual.fit(rows, threshold=0.3)
    assert w["n"] == 60  # only the decisions where the rules stored a statement as new
    p = residual.ResidualPolicy(w)
    assert p.p_helped(f_short) < 0.1 < 0.9 < p.p_helped(f_long)
    assert (p.decide(f_short), p.decide(f_long)) == (DROP, NEW)


def test_training_stores_a_residual_policy_active_only_when_it_beat_the_rules_on_its_own_orgs_data(
    client, world, admin_engine, app
):
    from app.kit.database.db import bind_principal

    a, b = world.org(), world.org()
    a1, a2 = world.user(a), world.user(a)
    b1, b2 = world.user(b), world.user(b)
    # close neighbours misled in org a (dropping them pays); everything helped in org b (no drop can beat the rules)
    record(admin_engine, a1.org_id, [a1, a2], wrong_from=0.5, statement=STATEMENT)
    record(admin_engine, b1.org_id, [b1, b2], wrong_from=2.0, statement=STATEMENT)
    got = {}
    for user in (a1, b1):
        with app.state.sessions() as db:  # under row-level security, bound to the org
            bind_principal(db, None, org_id=user.org_id, all_scopes=True)
            got[user.org_id] = manager.train(db, user.org_id, actor_id=None, job_id=None)
            db.commit()
    with Session(admin_engine) as db:
        va, vb = manager.versions(db, a1.org_id)[-1], manager.versions(db, b1.org_id)[-1]
        pa, pb = manager.policy_for(db, a1.org_id), manager.policy_for(db, b1.org_id)
    # Org a: the threshold was chosen on its training folds; the policy beat the rules on held-out sources.
    assert got[a1.org_id]["status"] == "active" and va["metrics"]["beats_rules"]
    assert va["metrics"]["learned"]["reward"] > va["metrics"]["rules"]["reward"] and va["metrics"]["threshold"] > 0
    assert isinstance(pa, residual.ResidualPolicy) and pa.version == va["version"]
    near, far = distilled(STATEMENT.format(k=1), 0.9), distilled(STATEMENT.format(k=1), 0.1)
    assert (pa.decide(near), pa.decide(far)) == (DROP, NEW)
    # Org b: the same fitting on its own decisions only (80 of them, none of org a's) never beat
    # the rules, so the version is stored inactive and org b keeps the rules.
    assert (got[b1.org_id]["labelled"], got[b1.org_id]["status"]) == (80, "inactive")
    assert not vb["metrics"]["beats_rules"] and vb["metrics"]["learned"]["reward"] <= vb["metrics"]["rules"]["reward"]
    assert pb is RULES
    assert va["training"]["sha256"] != vb["training"]["sha256"]


def test_the_bench_labels_a_memory_never_served_as_not_helped_and_keeps_each_questions_hit():
    """bench/quality/manager.py: the residual's rows carry reward 0 for a memory no question was
    served, and the per-question hits the paired CI is computed from."""
    from bench.quality.manager import play, residual_rows, score
    from tests.test_manager import three_turns

    conv = three_turns(["A: I adopted a dog named Rex.", "B: The weather is grey today.", "B: Cool."], "D1:1")
    e = np.eye(3, dtype=np.float32)
    played = play(conv, e, RULES)
    score(conv, np.stack([e[0], e[1]]), played, 1, 1.0)
    assert played.hit_list == [True, False]
    assert [r.reward for r in residual_rows(played)] == [1.0, -1.0, 0.0]  # helped, misled, never served


def test_the_scaling_bench_takes_the_learned_manager_curve():
    from bench.quality.memory_scaling import manager_curve
    from bench.quality.memory_scaling.__main__ import parse
    from bench.quality.memory_scaling.report import CURVE_LABELS

    assert "manager" in parse(["--quick", "--curves", "unlabelled,manager"]).curves
    assert manager_curve.NAME in CURVE_LABELS
