"""What the memory manager knows of a candidate memory when it decides: one table of named
features (`FEATURES`), each one function of a :class:`Candidate`.

A candidate is a statement distillation extracted (compared with the nearest active memory of its
scope) or, in consolidation, a memory compared with the one that would absorb it (its cluster's
winner). Everything here is what the pipeline already read through its own view: the
neighbours are the memories the pipeline compared the candidate with, and their utility was read
only for those ids. The rule verdicts (`repeats`: the near-duplicate rule of
app/memories/near_duplicates.py or the duplicate cluster; `conflicts`: the contradiction rule of
pipelines/consolidation/rules.py) are computed by the pipeline and passed in, so the rules policy
decides from the features alone and a learned policy sees the same inputs.

Features are numbers (no text leaves the pipeline); adding one is one function and one row here.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from app.llm.guard import content_words, values, words

DISTILL, CONSOLIDATE = "distill", "consolidate"
KINDS = ("fact", "rule", "preference", "procedure")


@dataclass(frozen=True)
class Neighbour:
    """A memory the candidate was compared with (nearest first)."""

    id: uuid.UUID | None
    text: str
    cosine: float
    n_sources: int = 0
    utility: float | None = None  # app/feedback/service.py's estimate; None: no feedback
    recorded_at: datetime | None = None


@dataclass(frozen=True)
class Candidate:
    stage: str  # DISTILL | CONSOLIDATE
    text: str
    kind: str
    visibility: str
    confidence: float
    n_sources: int
    recorded_at: datetime | None
    repeats: bool  # the near-duplicate rule says it repeats the first neighbour
    conflicts: bool  # the contradiction rule says it contradicts the first neighbour
    neighbours: tuple[Neighbour, ...] = field(default_factory=tuple)


def _nb(c: Candidate) -> Neighbour | None:
    return c.neighbours[0] if c.neighbours else None


def _jaccard(a: str, b: str) -> float:
    ca, cb = content_words(a), content_words(b)
    return len(ca & cb) / len(ca | cb) if ca and cb else 0.0


def _days(a: datetime | None, b: datetime | None) -> float:
    return abs((a - b).total_seconds()) / 86400.0 if a and b else 0.0


def _top(c: Candidate, k: int, f: Callable[[Neighbour], float]) -> float:
    got = [f(n) for n in c.neighbours[:k]]
    return sum(got) / len(got) if got else 0.0


def _is_kind(kind: str) -> Callable[[Candidate], float]:
    return lambda c: float(c.kind == kind)


FEATURES: dict[str, Callable[[Candidate], float]] = {
    "stage_consolidate": lambda c: float(c.stage == CONSOLIDATE),
    "repeats": lambda c: float(c.repeats),
    "conflicts": lambda c: float(c.conflicts),
    "no_neighbour": lambda c: float(not c.neighbours),
    "cos_top1": lambda c: _top(c, 1, lambda n: n.cosine),
    "cos_top3": lambda c: _top(c, 3, lambda n: n.cosine),
    "lexical_top1": lambda c: _top(c, 1, lambda n: _jaccard(c.text, n.text)),
    "lexical_top3": lambda c: _top(c, 3, lambda n: _jaccard(c.text, n.text)),
    "same_values": lambda c: float(bool(_nb(c)) and values(c.text) == values(_nb(c).text)),
    "log_sources": lambda c: math.log1p(c.n_sources),
    "source_agreement": lambda c: math.log1p(c.n_sources) - math.log1p(_nb(c).n_sources if _nb(c) else 0),
    "neighbour_utility": lambda c: (_nb(c).utility if _nb(c) and _nb(c).utility is not None else 0.5) - 0.5,
    "neighbour_has_feedback": lambda c: float(bool(_nb(c)) and _nb(c).utility is not None),
    "log_age_gap_days": lambda c: math.log1p(_days(c.recorded_at, _nb(c).recorded_at if _nb(c) else None)),
    "newer_than_neighbour": lambda c: float(
        bool(_nb(c) and c.recorded_at and _nb(c).recorded_at and c.recorded_at > _nb(c).recorded_at)
    ),
    "confidence": lambda c: float(c.confidence),
    "log_words": lambda c: math.log1p(len(words(c.text))),
    "has_values": lambda c: float(bool(values(c.text))),
    **{f"kind_{k}": _is_kind(k) for k in KINDS},
    "visibility_org": lambda c: float(c.visibility == "org"),
}
NAMES = tuple(FEATURES)


def features(c: Candidate) -> dict[str, float]:
    """The candidate's named features, rounded (they are stored with the decision)."""
    return {name: round(float(f(c)), 6) for name, f in FEATURES.items()}
