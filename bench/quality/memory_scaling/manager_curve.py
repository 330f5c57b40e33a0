"""The scaling bench's learned-manager curve: the unlabelled curve again, in an org whose memory
manager is the policy `memscale admin train-manager` fitted in another org, on other spaces.

Training: spaces drawn from another seed (none of them is evaluated), their log shards (each
TRAIN_LOGS_FACTOR times the evaluated shard's size: the service trains only from 20 + 5 labelled
decisions on) played into a training org shard by shard (real distill + consolidate jobs, every
shard distilled), and after each shard one round of clean feedback (feedback.py's Stream: honest
users mark what /v1/context handed them on those spaces' questions, from the ground truth). Then the service's
own training (app/manager/service.py `train`): the residual policy, active only if it beat the
rules on the training org's held-out sources.

Evaluation: a fresh org gets that version as its active policy (a policy is an org's own; the bench
hands the evaluation org a copy, as an operator deploying a pretrained policy would) and plays the
unlabelled curve of the evaluated spaces; each point is measured as every curve is, memory count
included. If the trained version is not active the evaluation org keeps the rules, and the
result says so: the curve then is the rules under another name and is reported as such.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from bench.quality.memory_scaling import feedback as fb
from bench.quality.memory_scaling.curves import draw, grow, run_curve

SEED_OFFSET = 1009  # the training spaces' seed: a.seed + SEED_OFFSET
TRAIN_LOGS_FACTOR = 4  # log episodes per training shard, times the evaluated curve's (training needs 20 + 5 labelled)
NAME = "learned_manager"


def train(h, a, tmp: Path) -> dict:
    """Play the training spaces into a training org with feedback and train its manager; the
    stored version (status, weights, metrics, training)."""
    from sqlalchemy.orm import Session

    from app.manager import repository as repo
    from app.manager import service as manager

    seed = a.seed + SEED_OFFSET
    sub = tmp / "manager_training"
    sub.mkdir(parents=True, exist_ok=True)
    tdata = draw(argparse.Namespace(**{**vars(a), "seed": seed, "logs_per_shard": a.logs_per_shard * TRAIN_LOGS_FACTOR}), sub)
    org = h.new_org("manager_training")
    fb.add_users(h, org, fb.USERS)
    questions = fb.train_questions(seed, tdata.spaces, tdata.tests, a.train_per_space) + tdata.tests
    stream = fb.Stream(fb.Variant("manager_training", 0.0, 0.0), questions, random.Random(seed), a.budget)
    rounds = []
    for k in range(1, tdata.top + 1):
        grow(h, org, "unlabelled_judge", k, tdata, measured=True)
        rounds.append(stream.round(org))
    with Session(h.admin) as db:
        stats = manager.train(db, org.id, actor_id=None, job_id=None)
        db.commit()
        version = next(v for v in manager.versions(db, org.id) if v["version"] == stats["version"])
        weights = next(p.weights for p in repo.policies(db, org.id) if p.version == stats["version"])
    return {**version, "weights": weights, "train_spaces": [sp.name for sp in tdata.spaces], "feedback_rounds": rounds}


def run(h, a, data, measure, tmp: Path) -> dict:
    """Train in another org on other spaces, then the unlabelled curve under that policy."""
    from sqlalchemy.orm import Session

    from app.manager import repository as repo

    trained = train(h, a, tmp)
    org = h.new_org(NAME)
    active = trained["status"] == "active"
    if active:
        with Session(h.admin) as db:
            repo.add_policy(
                db,
                org_id=org.id,
                version=1,
                status="active",
                weights=trained["weights"],
                metrics=trained["metrics"],
                training={**trained["training"], "trained_in": "manager_training", "spaces": trained["train_spaces"]},
            )
            db.commit()
    points: list[dict] = []
    run_curve(h, org, "unlabelled_judge", data, a.points, lambda k: points.append(measure(org, NAME, k, f"{NAME} {k} shards")))
    summary = {k: trained[k] for k in ("version", "status", "metrics", "training", "train_spaces", "feedback_rounds")}
    return {"points": points, "policy_active": active, "trained": summary}
