"""Answer scoring: SQuAD-style normalisation, token F1, exact match, and gold-value recall."""

from __future__ import annotations

import re
import string
from collections import Counter

_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def f1(pred: str, gold: str) -> float:
    p, g = normalize(pred).split(), normalize(gold).split()
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def exact_match(pred: str, gold: str) -> float:
    return float(normalize(pred) == normalize(gold))


def value_recall(pred: str, values: list[str]) -> float:
    """Share of the gold values that appear (normalised, as whole words) in the prediction."""
    p = f" {normalize(pred)} "
    return sum(f" {normalize(v)} " in p for v in values) / len(values)
