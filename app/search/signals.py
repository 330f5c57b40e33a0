"""The hybrid ranking's signals: each one function over one item type's pool, listed in `SIGNALS`
with the `Tuning` weight that scales it (0: off). Adding a signal is one function, one entry here
and one field of `Tuning`.

A signal returns each pooled row's contribution; `fuse` adds them to a running total in the
table's order (the context signals read the total so far: a turn borrows from its neighbours'
and its session's scores), so a row's fused score is exactly the sum of its contributions.
Every statistic (z-scores over the pool) is taken over rows the caller may be served.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from app.search.tuning import Tuning


@dataclass(frozen=True)
class Pool:
    """One item type's candidates and what the signals read of them.

    `rows`: (id, d: cosine distance or None, session_id, n_lex: the row's lexeme count);
    `bm25`: {id: BM25}; `lifts`: {signal name: {id: raw value}} for the lifts that ran (the
    vocabulary lift, the named time, the second round); `pairs`: (neighbour id, turn id) of
    adjacent turns; `turns`: conversation turns (the context signals and the length prior apply);
    `utility`: {id: the estimate of app/feedback/service.py} of the pooled rows with feedback."""

    rows: list
    bm25: dict
    lifts: dict = field(default_factory=dict)
    pairs: list = field(default_factory=list)
    turns: bool = False
    utility: dict = field(default_factory=dict)


def z(values: dict) -> dict:
    """z-scores over the pool (a constant feature contributes 0)."""
    if not values:
        return {}
    mean = sum(values.values()) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values.values()) / len(values))
    return {k: (v - mean) / sd if sd > 1e-9 else 0.0 for k, v in values.items()}


def _cosines(pool: Pool) -> dict:
    """Each row's cosine; a row without an embedding counts as far as the farthest in the pool."""
    known = [1.0 - float(r.d) for r in pool.rows if r.d is not None]
    floor = min(known, default=0.0)
    return {r.id: 1.0 - float(r.d) if r.d is not None else floor for r in pool.rows}


def vector(pool: Pool, total: dict, w: float) -> dict:
    """w x the z-normalised cosine."""
    return {i: w * v for i, v in z(_cosines(pool)).items()}


def bm25(pool: Pool, total: dict, w: float) -> dict:
    """The z-normalised BM25 (a row a text query did not return counts as 0); its weight is 1."""
    return z({i: pool.bm25.get(i, 0.0) for i in total})


def lift(name: str) -> Callable[[Pool, dict, float], dict]:
    """w x the positive part of a lift's z-score: a lift only lifts, so a clear first-round winner
    without its words keeps its place."""

    def signal(pool: Pool, total: dict, w: float) -> dict:
        values = pool.lifts.get(name)
        if not values:
            return {}
        return {i: w * max(0.0, zl) for i, zl in z({i: values.get(i, 0.0) for i in total}).items()}

    signal.__name__ = signal.__qualname__ = f"lift_{name}"
    return signal


def spoken_by_named(query: str, who: dict) -> dict:
    """The `speaker` lift's values: {id: 1.0} for the turns (`who`: {id: speaker}) whose speaker's
    first name is a word of the query. A question about Caroline is answered by what Caroline said,
    often in sessions and words the question does not share."""
    named = {s for s in set(who.values()) if s.split() and re.search(rf"\b{re.escape(s.split()[0])}\b", query, re.I)}
    return {i: 1.0 for i, s in who.items() if s in named}


def neighbour(pool: Pool, total: dict, w: float) -> dict:
    """A turn gains w x the best fused score so far of the turns just before and after it (when in the pool)."""
    if not pool.turns:
        return {}
    support: dict = {}
    for nid, hid in pool.pairs:
        if nid in total and hid in total:
            support[hid] = max(support.get(hid, 0.0), total[nid])
    return {i: w * max(0.0, support.get(i, 0.0)) for i in total}


def session(pool: Pool, total: dict, w: float) -> dict:
    """A turn gains w x the best score so far in its session (sessions ranked first, turns taken from the best)."""
    if not pool.turns:
        return {}
    best: dict = {}
    for r in pool.rows:
        if r.session_id is not None:
            best[r.session_id] = max(best.get(r.session_id, -math.inf), total[r.id])
    return {r.id: w * best[r.session_id] if r.session_id is not None else 0.0 for r in pool.rows}


def length(pool: Pool, total: dict, w: float) -> dict:
    """w x (ln(1 + the turn's lexemes) - their mean over the pool): a one-word turn answers less often."""
    if not pool.turns:
        return {}
    size = {r.id: math.log1p(r.n_lex or 0) for r in pool.rows}
    mean = sum(size.values()) / len(size) if size else 0.0
    return {i: w * (size[i] - mean) for i in total}


UTILITY_FLOOR = 0.1  # below this estimate a memory is demoted no further (consolidation quarantines it)


def utility(pool: Pool, total: dict, w: float) -> dict:
    """w x ln(estimate / 0.5), the estimate floored at UTILITY_FLOOR: a bounded prior from feedback,
    in [w ln(0.2), w ln 2] (an odds-like factor on the uninformed 0.5); a row without feedback
    gains 0, so a pool without any is ranked exactly as without the signal."""
    if not pool.utility:
        return {}
    return {i: w * math.log(max(e, UTILITY_FLOOR) / 0.5) for i, e in pool.utility.items() if i in total}


@dataclass(frozen=True)
class Signal:
    fn: Callable[[Pool, dict, float], dict]
    setting: str | None  # the Tuning field that weighs it (None: weight 1, always on)


SIGNALS: dict[str, Signal] = {
    "vector": Signal(vector, "w_vector"),
    "bm25": Signal(bm25, None),
    "vocabulary": Signal(lift("vocabulary"), "vocab_weight"),
    "time": Signal(lift("time"), "time_weight"),
    "speaker": Signal(lift("speaker"), "speaker_weight"),
    "second_round": Signal(lift("second_round"), "expand_weight"),
    "neighbour": Signal(neighbour, "neighbour"),
    "session": Signal(session, "session"),
    "length": Signal(length, "length_prior"),
    "utility": Signal(utility, "utility_weight"),
}


def fuse(pool: Pool, tuning: Tuning, *, explain: bool = False) -> tuple[dict, dict | None]:
    """({id: fused score}, {id: {signal: contribution}} when `explain`): every signal of `SIGNALS`
    with a non-zero weight, in order, added to the running total."""
    total = {r.id: 0.0 for r in pool.rows}
    parts: dict | None = {i: {} for i in total} if explain else None
    for name, sig in SIGNALS.items():
        w = getattr(tuning, sig.setting) if sig.setting else 1.0
        if not w:
            continue
        got = sig.fn(pool, total, w)
        for i, c in got.items():
            total[i] += c
            if parts is not None:
                parts[i][name] = c
    return total, parts
