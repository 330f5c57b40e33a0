"""Pure decisions of consolidation: contradiction, who wins (which memories are near-duplicates is
decided in app/memories/near_duplicates.py), and what feedback asks for."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime

import numpy as np

_NEG = re.compile(r"\b(not|never|no|don't|doesn't|isn't|aren't|won't|cannot|can't|avoid|stop|without)\b", re.I)
_NUM = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?")
_DAYS = re.compile(
    r"\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday|daily|weekly|monthly|quarterly|"
    r"yearly|morning|evening|night|am|pm)s?\b",
    re.I,
)
_WORD = re.compile(r"[a-z0-9]+")
_OPPOSITES = [
    ("enable", "disable"),
    ("allow", "deny"),
    ("allow", "block"),
    ("increase", "decrease"),
    ("before", "after"),
    ("true", "false"),
    ("yes", "no"),
    ("on", "off"),
    ("include", "exclude"),
    ("prefer", "avoid"),
    ("dark", "light"),
    ("always", "never"),
    ("required", "optional"),
]


@dataclass
class Item:
    id: uuid.UUID
    text: str
    vec: np.ndarray
    confidence: float
    recorded_at: datetime
    n_sources: int


def contradicts(a: str, b: str) -> bool:
    """Same subject (the caller checked similarity), contradicting claims: a negation on one side
    only, different numbers or schedule words, or a known pair of opposites."""
    if bool(_NEG.search(a)) != bool(_NEG.search(b)):
        return True
    na, nb = set(_NUM.findall(a)), set(_NUM.findall(b))
    if na and nb and na != nb:
        return True
    da, db_ = {d.lower() for d in _DAYS.findall(a)}, {d.lower() for d in _DAYS.findall(b)}
    if da and db_ and da != db_:
        return True
    wa, wb = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))

    def has(words: set[str], stem: str) -> bool:  # "allow" matches "allowed", "allows"
        return any(w == stem or (w.startswith(stem) and len(w) - len(stem) <= 3) for w in words)

    return any(
        (has(wa, x) and has(wb, y) and not has(wb, x) and not has(wa, y))
        or (has(wa, y) and has(wb, x) and not has(wb, y) and not has(wa, x))
        for x, y in _OPPOSITES
    )


def winner(items: list[Item]) -> Item:
    """Newer and better-sourced wins: more sources first, then more recent, then more confident."""
    return max(items, key=lambda i: (i.n_sources, i.recorded_at, i.confidence))


# Feedback: distinct users, never votes, so that one key cannot trigger either. Which memories are held
# for review (quarantined) is app/feedback/service.py's rule (WRONG_USERS), which ranking applies too.
OUTDATED_USERS = 2  # users who said `outdated` before a supersede is proposed (a record, no change)


def feedback_review(wrong: dict, outdated: dict, active: set) -> tuple[list, list]:
    """(to quarantine, to propose for supersession) among the `active` memory ids, from {id:
    distinct users} of the memories held for review and of `outdated`; a memory to quarantine is
    not proposed as well."""
    quarantine = sorted((i for i in wrong if i in active), key=str)
    propose = sorted(
        (i for i, n in outdated.items() if n >= OUTDATED_USERS and i in active and i not in set(quarantine)), key=str
    )
    return quarantine, propose
