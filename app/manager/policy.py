"""The memory manager's decision: a candidate's features (app/manager/features.py) -> an action.

`RulesPolicy` is the rules distillation and consolidation have always applied, read from the
features: distillation stores a statement as new unless it repeats the nearest memory of its
scope (then it confirms it: merge); consolidation merges a near-duplicate into its cluster's
winner, or supersedes it when the two contradict, and supersedes a contradicting memory of the
same subject. The rules never drop a candidate.

`LearnedPolicy` is a contextual bandit fitted on logged decisions and their rewards: one L2
logistic regression per action, P(the resulting memory helped | features, action), fitted on the
decisions where that action was taken. The value of storing, merging or superseding is
2P - 1 (reward +1 helped, -1 misled); dropping is worth 0 (a dropped memory neither helps nor
misleads). It takes the rules' action unless another action the stage allows, with a model of
its own, is worth more by MARGIN; an action never taken in the logs has no model and is never
chosen over the rules. Fitted with numpy in well under a second for thousands of decisions.

Offline evaluation (`replay`) uses only what was logged: a held-out decision counts its logged
reward when the policy takes the logged action, 0 when it drops, and 0 (counted as `unknown`)
when it takes another action whose outcome was never observed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.manager.features import NAMES

NEW, MERGE, SUPERSEDE, DROP = "new", "merge", "supersede", "drop"
ACTIONS = (NEW, MERGE, SUPERSEDE, DROP)
ALLOWED = {"distill": (NEW, MERGE, SUPERSEDE, DROP), "consolidate": (NEW, MERGE, SUPERSEDE)}
MARGIN = 0.1  # how much more another action must be worth than the rules' before it is taken
L2 = 1.0
MIN_ROWS_PER_ACTION = 10  # labelled decisions of an action before it gets a model


def stage_of(f: dict) -> str:
    return "consolidate" if f.get("stage_consolidate") else "distill"


class RulesPolicy:
    """Today's rules, from the features alone."""

    version = None

    def decide(self, f: dict) -> str:
        if stage_of(f) == "distill":
            return MERGE if f["repeats"] else NEW
        if f["repeats"]:
            return SUPERSEDE if f["conflicts"] else MERGE
        return SUPERSEDE if f["conflicts"] else NEW


RULES = RulesPolicy()


def _x(f: dict, names: Sequence[str]) -> np.ndarray:
    return np.array([float(f.get(n, 0.0)) for n in names], dtype=np.float64)


@dataclass(frozen=True)
class Scaler:
    """Features as one standardised vector: their names, and their mean and scale over the rows a
    model was fitted on (a constant feature keeps scale 1). Every learned policy reads its features
    through one."""

    names: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def fitted(cls, features: Sequence[dict], names: Sequence[str]) -> tuple[Scaler, np.ndarray]:
        """The scaler of `features` and their standardised matrix (one row each)."""
        x = np.array([_x(f, names) for f in features]) if len(features) else np.zeros((0, len(names)))
        mean = x.mean(axis=0) if len(x) else np.zeros(len(names))
        scale = x.std(axis=0) if len(x) else np.ones(len(names))
        scaler = cls(tuple(names), mean, np.where(scale > 1e-9, scale, 1.0))
        return scaler, (x - scaler.mean) / scaler.scale

    @classmethod
    def stored(cls, weights: dict) -> Scaler:
        """The scaler a policy's stored weights hold (`as_weights`)."""
        f64 = np.float64
        return cls(tuple(weights["names"]), np.asarray(weights["mean"], dtype=f64), np.asarray(weights["scale"], dtype=f64))

    def z(self, f: dict) -> np.ndarray:
        return (_x(f, self.names) - self.mean) / self.scale

    def as_weights(self) -> dict:
        return {"names": list(self.names), "mean": self.mean.round(6).tolist(), "scale": self.scale.round(6).tolist()}


@dataclass
class LearnedPolicy:
    """Per-action logistic models over standardised features; `weights` is what is stored."""

    weights: dict  # {"names": [...], "mean": [...], "scale": [...], "models": {action: {"w": [...], "b": b}}}
    version: int | None = None

    def __post_init__(self) -> None:
        self._scaler = Scaler.stored(self.weights)
        self._models = {a: (np.asarray(m["w"], dtype=np.float64), float(m["b"])) for a, m in self.weights["models"].items()}

    def values(self, f: dict) -> dict[str, float]:
        """The expected reward of each action this policy can judge (drop: 0)."""
        z = self._scaler.z(f)
        out = {a: float(2.0 / (1.0 + np.exp(-(z @ w + b))) - 1.0) for a, (w, b) in self._models.items()}
        out[DROP] = 0.0
        return out

    def decide(self, f: dict) -> str:
        rules = RULES.decide(f)
        v = self.values(f)
        base = v.get(rules, 0.0)
        best, best_v = rules, base
        for a in ALLOWED[stage_of(f)]:
            if a != rules and a in v and v[a] > best_v and v[a] >= base + MARGIN:
                best, best_v = a, v[a]
        return best


def logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, *, iters: int = 30) -> tuple[np.ndarray, float]:
    """Weighted L2 logistic regression by Newton's method (the intercept is penalised lightly too,
    so that one-class data gives a finite model)."""
    n, d = x.shape
    xb = np.hstack([x, np.ones((n, 1))])
    beta = np.zeros(d + 1)
    pen = np.full(d + 1, L2)
    pen[-1] = 1e-3
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(xb @ beta)))
        grad = xb.T @ (w * (p - y)) + pen * beta
        h = (xb * (w * p * (1 - p))[:, None]).T @ xb + np.diag(pen)
        step = np.linalg.solve(h, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta[:-1], float(beta[-1])


@dataclass(frozen=True)
class Row:
    """A logged decision with its reward: features, action taken, reward in [-1, 1], weight."""

    features: dict
    action: str
    reward: float
    weight: float = 1.0


def fit(rows: Sequence[Row], names: Sequence[str] = NAMES) -> dict:
    """The weights of a LearnedPolicy fitted on `rows` (labelled decisions)."""
    scaler, z = Scaler.fitted([r.features for r in rows], names)
    models = {}
    for a in ACTIONS:
        idx = [i for i, r in enumerate(rows) if r.action == a]
        if a == DROP or len(idx) < MIN_ROWS_PER_ACTION:
            continue
        y = np.array([1.0 if rows[i].reward > 0 else 0.0 for i in idx])
        w = np.array([rows[i].weight for i in idx])
        coef, b = logistic(z[idx], y, w)
        models[a] = {"w": [round(float(c), 6) for c in coef], "b": round(b, 6), "n": len(idx)}
    return {**scaler.as_weights(), "models": models}


def replay(policy, rows: Sequence[Row]) -> dict:
    """The policy's mean weighted reward over logged decisions (see the module's docstring), the
    share of its actions that differ from the logged ones and from the rules', and how many it
    dropped or took without an observed outcome."""
    total = wsum = 0.0
    differ = differ_rules = dropped = unknown = 0
    for r in rows:
        a = policy.decide(r.features)
        wsum += r.weight
        if a == r.action:
            total += r.weight * r.reward
        else:
            differ += 1
            dropped += a == DROP
            unknown += a != DROP
        differ_rules += a != RULES.decide(r.features)
    n = len(rows)
    return {
        "n": n,
        "reward": round(total / wsum, 4) if wsum else 0.0,
        "differ_logged": round(differ / n, 4) if n else 0.0,
        "differ_rules": round(differ_rules / n, 4) if n else 0.0,
        "dropped": dropped,
        "unknown": unknown,
    }
