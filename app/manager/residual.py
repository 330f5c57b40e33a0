"""A memory manager that learns only where to deviate from the rules (app/manager/policy.py).

`ResidualPolicy` takes the rules' action, except that a distilled statement the rules would store
as new is dropped when a model gives it a probability of ever helping below `threshold`. The model
is one L2 logistic regression, P(the memory helped | features), fitted on decisions where the
rules stored a memory: helped (reward > 0) against everything else (it misled, or it was never
found useful). The threshold is the exchange rate between a memory and the chance it helps; it is
chosen on data the model did not train on (`choose_threshold`: leave one group of sources out),
as the one with the best held-out quality (threshold 0, the rules, among the candidates). With threshold 0 the policy
is the rules, so where the model is not confident it decides exactly as they do.

A drop is the only deviation: merging a statement that does not repeat its neighbour would attach
a source whose text the memory does not hold, and superseding would remove a memory; dropping
loses only what the statement itself would have brought, which is what the model estimates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from app.manager.features import NAMES
from app.manager.policy import ALLOWED, DROP, NEW, RULES, Row, Scaler, logistic, stage_of

RESIDUAL = "residual"
# Candidate thresholds on P(helped), from "never deviate" (0) to "drop what is as likely to mislead as help".
THRESHOLDS = (0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3, 0.4, 0.5)


def deviable(f: dict) -> bool:
    """Whether the policy may deviate here: the rules store a distilled statement as new next to
    an existing memory (the first memory of a scope is always kept: with nothing stored there is
    nothing the statement could be redundant with, and a model that dropped it would keep the
    scope empty)."""
    return stage_of(f) == "distill" and not f.get("no_neighbour") and DROP in ALLOWED["distill"] and RULES.decide(f) == NEW


@dataclass
class ResidualPolicy:
    """The rules, or a drop where P(helped) < threshold; `weights` is what is stored."""

    weights: dict  # {"kind": "residual", "names", "mean", "scale", "w", "b", "threshold", "n"}
    version: int | None = None

    def __post_init__(self) -> None:
        self._scaler = Scaler.stored(self.weights)
        self._w = np.asarray(self.weights["w"], dtype=np.float64)
        self._b = float(self.weights["b"])
        self.threshold = float(self.weights["threshold"])

    def p_helped(self, f: dict) -> float:
        z = self._scaler.z(f)
        return float(1.0 / (1.0 + np.exp(-(z @ self._w + self._b))))

    def decide(self, f: dict) -> str:
        rules = RULES.decide(f)
        if self.threshold > 0 and deviable(f) and self.p_helped(f) < self.threshold:
            return DROP
        return rules


def training_rows(rows: Sequence[Row]) -> list[Row]:
    """The rows the model learns from: decisions where the rules stored a statement as new."""
    return [r for r in rows if r.action == NEW and deviable(r.features)]


def fit(rows: Sequence[Row], names: Sequence[str] = NAMES, *, threshold: float = 0.0) -> dict:
    """The weights of a ResidualPolicy: P(helped) fitted on `training_rows(rows)`, at `threshold`."""
    use = training_rows(rows)
    scaler, z = Scaler.fitted([r.features for r in use], names)
    if len(use):
        y = np.array([1.0 if r.reward > 0 else 0.0 for r in use])
        coef, b = logistic(z, y, np.ones(len(use)))
    else:
        coef, b = np.zeros(len(names)), 0.0
    return {
        "kind": RESIDUAL,
        **scaler.as_weights(),
        "w": [round(float(c), 6) for c in coef],
        "b": round(float(b), 6),
        "threshold": float(threshold),
        "n": len(use),
    }


def at(weights: dict, threshold: float) -> dict:
    return {**weights, "threshold": float(threshold)}


def choose_threshold(
    folds: Sequence[object], evaluate: Callable[[object, float], tuple[float, float]], thresholds: Sequence[float] = THRESHOLDS
) -> tuple[float, list[dict]]:
    """The threshold with the best summed held-out quality over `folds` (ties: the one keeping
    fewer memories, then the rules), and the table it was chosen from. `evaluate(fold, t)` gives
    (quality, memories kept) of the fold's held-out part under a model fitted on the rest at t.
    Taking the best rather than the largest that still ties the rules keeps the choice off the
    edge where one more step loses quality; threshold 0 (the rules) is always a candidate, so
    the chosen one never did worse than the rules on the folds."""
    table = []
    for t in sorted({0.0, *thresholds}):
        got = [evaluate(fold, t) for fold in folds]
        table.append({"threshold": t, "quality": sum(q for q, _ in got), "memories": sum(m for _, m in got)})
    best = max(table, key=lambda row: (round(row["quality"], 9), -row["memories"], -row["threshold"]))
    return best["threshold"], table
