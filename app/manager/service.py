"""The memory manager: which policy decides for an org, the record of each decision, the reward
of a decision from the feedback on the memory it produced, and training a versioned policy.

Policy: an org's active learned policy when one exists, which it only is when it beat the rules
on held-out decisions at training time; otherwise the rules (the fallback and the baseline).
Training fits the residual policy (app/manager/residual.py: the rules, or a drop where the model
is confident the memory would not help, its threshold chosen on folds of the training sources);
versions stored as the per-action bandit (app/manager/policy.py) still load. A policy and its
training data are the org's own: every read names the org, under org-level row-level security.

Reward of a decision: from the feedback on the memory it produced or kept serving, read with the
utility's own bounds (app/feedback/service.py: each user's vote counts once, decayed): helpful
votes and distinct users who marked it `used` in a successful retrieval on one side, `wrong` votes
and distinct users who said `outdated` on the other; the reward is 2e - 1 for the Beta posterior
mean e over them, its sign is the label and its size the weight: one user (at most two signals a
side, each counted once) moves it by at most 4 x ONE_USER_BOUND. A decision without any feedback
on its memory is unlabelled and left out of training (as are drops: nothing was served).

Training splits by source (the conversation or episode a decision came from), never by row:
every decision of one source is in the training part or all in the held-out part.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.audit.service import record
from app.feedback import service as feedback
from app.kit.database.db import view_of
from app.manager import repository as repo
from app.manager import residual
from app.manager.features import Candidate, features
from app.manager.policy import DROP, RULES, LearnedPolicy, Row, RulesPolicy, replay

MAX_DECISIONS = 20_000  # the most recent decisions a training run reads
HELDOUT_BUCKETS = 5  # one source in five (by hash) is held out
THRESHOLD_FOLDS = 4  # the training sources split (by another part of the hash) to choose the threshold
MIN_TRAIN, MIN_HELDOUT = 20, 5  # labelled decisions needed before a policy may replace the rules


def policy_for(db: Session, org_id: uuid.UUID) -> RulesPolicy | LearnedPolicy | residual.ResidualPolicy:
    p = repo.active_policy(db, org_id)
    return RULES if p is None else load(p.weights, version=p.version)


def load(weights: dict, *, version: int | None = None) -> LearnedPolicy | residual.ResidualPolicy:
    """The policy stored weights describe: a residual policy, or (older versions) the per-action bandit."""
    if weights.get("kind") == residual.RESIDUAL:
        return residual.ResidualPolicy(weights, version=version)
    return LearnedPolicy(weights, version=version)


def decide(policy, c: Candidate) -> tuple[str, str, dict]:
    """(the policy's action, the rules' action, the features) for one candidate."""
    f = features(c)
    return policy.decide(f), RULES.decide(f), f


def neighbour_utilities(db: Session, org_id: uuid.UUID, ids: list) -> dict[str, float]:
    """{memory id as text: utility estimate} for neighbours the pipeline already read (with feedback)."""
    return {m: feedback.estimate(t.helpful, t.wrong) for m, t in feedback.tallies(db, org_id, ids).items()}


def record_decision(
    db: Session,
    *,
    org_id: uuid.UUID,
    decision: tuple[str, str, dict],
    policy,
    memory_id: uuid.UUID | None,
    neighbour_id: uuid.UUID | None,
    source: str,
    owner_id: uuid.UUID | None,
    job_id: uuid.UUID | None,
) -> None:
    """Store one decision with its features (in main only: a branch's decisions are not training data)."""
    if view_of(db).branch_id is not None:
        return
    action, rules_action, f = decision
    repo.add_decision(
        db,
        org_id=org_id,
        stage="consolidate" if f.get("stage_consolidate") else "distill",
        action=action,
        rules_action=rules_action,
        policy_version=policy.version,
        features=f,
        memory_id=memory_id,
        neighbour_id=neighbour_id,
        source=source,
        owner_id=owner_id,
        job_id=job_id,
    )


def rewards(db: Session, org_id: uuid.UUID, memory_ids: list) -> dict[str, tuple[float, float]]:
    """{memory id as text: (reward in [-1, 1], weight)} for the memories with any feedback."""
    ids = {str(m) for m in memory_ids}
    if not ids:
        return {}
    got = feedback.tallies(db, org_id, list(ids))
    outdated = {str(m): n for m, n in feedback.flagged(db, org_id, "outdated", 1).items() if str(m) in ids}
    used = repo.used_with_success(db, org_id, ids)
    out = {}
    for m in ids:
        t = got.get(m)
        good = (t.helpful if t else 0.0) + used.get(m, 0)
        bad = (t.wrong if t else 0.0) + outdated.get(m, 0)
        if good + bad <= 0:
            continue
        r = 2.0 * feedback.estimate(good, bad) - 1.0
        if abs(r) > 1e-9:
            out[m] = (r, abs(r))
    return out


def heldout(source: str) -> bool:
    return int(hashlib.sha256(source.encode()).hexdigest()[:8], 16) % HELDOUT_BUCKETS == 0


def _fold(source: str) -> int:
    return int(hashlib.sha256(source.encode()).hexdigest()[8:16], 16) % THRESHOLD_FOLDS


def fit_residual(rows: list[Row], sources: list[str]) -> tuple[dict, list[dict]]:
    """A residual policy's weights fitted on `rows`, its threshold chosen leave one fold of sources
    out: each fold is replayed under a model fitted on the other folds (quality: the summed logged
    reward of the decisions it keeps, a drop counting 0), and the table it was chosen from."""
    folds = sorted({_fold(s) for s in sources})
    fitted: dict[int, dict] = {}

    def evaluate(k: int, t: float) -> tuple[float, float]:
        if k not in fitted:
            fitted[k] = residual.fit([r for r, s in zip(rows, sources) if _fold(s) != k])
        policy = residual.ResidualPolicy(residual.at(fitted[k], t))
        part = [r for r, s in zip(rows, sources) if _fold(s) == k]
        acts = [policy.decide(r.features) for r in part]
        return sum(r.weight * r.reward for r, a in zip(part, acts) if a == r.action), sum(a != DROP for a in acts)

    t, table = residual.choose_threshold(folds, evaluate) if len(folds) > 1 else (0.0, [])
    return residual.fit(rows, threshold=t), table


def train(db: Session, org_id: uuid.UUID, *, actor_id: uuid.UUID | None, job_id: uuid.UUID | None) -> dict:
    """Fit a policy on the org's labelled decisions, evaluate it against the rules on the held-out
    sources, store it as the next version (active only if it beat the rules), audit it; its stats."""
    logged = repo.decisions(db, org_id, MAX_DECISIONS)
    got = rewards(db, org_id, [d.memory_id for d in logged])
    labelled = [(d, got[str(d.memory_id)]) for d in logged if str(d.memory_id) in got]
    rows = {d.id: Row(d.features, d.action, r, w) for d, (r, w) in labelled}
    train_ids = sorted((d.id for d, _ in labelled if not heldout(d.source)), key=str)
    test_ids = sorted((d.id for d, _ in labelled if heldout(d.source)), key=str)
    source_of = {d.id: d.source for d, _ in labelled}
    weights, table = fit_residual([rows[i] for i in train_ids], [source_of[i] for i in train_ids])
    learned = residual.ResidualPolicy(weights)
    test = [rows[i] for i in test_ids]
    metrics = {
        "decisions": len(logged),
        "labelled": len(labelled),
        "unlabelled": len(logged) - len(labelled),
        "train": len(train_ids),
        "heldout": len(test_ids),
        "rules": replay(RULES, test),
        "learned": replay(learned, test),
        "threshold": weights["threshold"],
        "thresholds": table,
    }
    if len(train_ids) < MIN_TRAIN or len(test_ids) < MIN_HELDOUT:
        metrics["beats_rules"], metrics["reason"] = False, f"too few labelled decisions (need {MIN_TRAIN} + {MIN_HELDOUT})"
    else:
        metrics["beats_rules"] = metrics["learned"]["reward"] > metrics["rules"]["reward"]
        metrics["reason"] = "beat the rules on held-out sources" if metrics["beats_rules"] else "did not beat the rules"
    ids = [str(d.id) for d, _ in labelled]
    training = {
        "count": len(ids),
        "sha256": hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest(),
        "train": len(train_ids),
        "heldout": len(test_ids),
        "heldout_sources": len({d.source for d, _ in labelled if heldout(d.source)}),
        "split": f"by source: sha256(source) mod {HELDOUT_BUCKETS} == 0 held out",
    }
    version = repo.next_version(db, org_id)
    status = "active" if metrics["beats_rules"] else "inactive"
    repo.set_status(db, org_id, was="active", now="inactive")
    p = repo.add_policy(
        db,
        org_id=org_id,
        version=version,
        status=status,
        weights=weights,
        metrics=metrics,
        training=training,
        created_by=actor_id,
        job_id=job_id,
        at=datetime.now(UTC),
    )
    record(
        db,
        org_id=org_id,
        actor_id=actor_id,
        action="manager.train",
        target_type="manager_policy",
        target_id=p.id,
        details={"version": version, "status": status, "training": training, "beats_rules": metrics["beats_rules"]},
    )
    return {
        "version": version,
        "policy_id": str(p.id),
        "status": status,
        **{k: metrics[k] for k in ("labelled", "train", "heldout")},
    }


def forget_user(db: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> int:
    """The decisions about the user's memories go; a policy trained while they were recorded is
    retired (the pipelines fall back to the rules until the org trains again). How many decisions."""
    n = repo.delete_owned_by(db, org_id, user_id)
    if n:
        repo.set_status(db, org_id, was="active", now="retired")
        repo.set_status(db, org_id, was="inactive", now="retired")
    return n


def versions(db: Session, org_id: uuid.UUID) -> list[dict]:
    """The org's policy versions (for the CLI and tests): version, status, metrics, training."""
    return [
        {"version": p.version, "status": p.status, "metrics": p.metrics, "training": p.training, "id": str(p.id)}
        for p in repo.policies(db, org_id)
    ]
