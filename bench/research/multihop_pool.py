"""bench/research/multihop.py's lever helpers: rows that join a question's 200-row pool (the
vector top-100 + text top-100) before the fusion, so that evidence outside it can be ranked, and
the session-diversity penalty."""

from __future__ import annotations

import math

import numpy as np


def beside(d: dict, seeds: list, reach: int, *, after: bool = False) -> list:
    """The turns within `reach` of each seed in its session (`after`: the following ones only)."""
    n = len(d["sess"])
    offsets = [o for o in range(0 if after else -reach, reach + 1) if o]
    return [j + o for j in seeds for o in offsets if 0 <= j + o < n and d["sess"][j + o] == d["sess"][j]]


def joins(d: dict, q: dict, cos, bm, pool: list, *, spk_vec: int, spk_text: int, sess_fill: int, sess_named: bool) -> list:
    """Rows that join the pool: the `spk_vec` nearest and the `spk_text` best-BM25 turns of a
    speaker the question names (a pool of that speaker's own turns beside the shared one), and
    the `sess_fill` nearest turns of each session with no turn in the pool (of the named speaker
    only with `sess_named`)."""
    from app.search.signals import spoken_by_named

    named = np.array(sorted(spoken_by_named(q["q"], dict(enumerate(d["speaker"])))), dtype=int)
    out: list = []
    if len(named):
        out += [int(j) for j in named[np.argsort(-cos[named], kind="stable")[:spk_vec]]]
        out += [int(j) for j in named[np.argsort(-bm[named], kind="stable")[:spk_text]] if bm[j] > 0]
    if sess_fill:
        have = {int(d["sess"][j]) for j in pool}
        cand = named if sess_named else np.arange(len(cos))
        for s in sorted({int(d["sess"][j]) for j in cand} - have):
            js = cand[d["sess"][cand] == s]
            out += [int(j) for j in js[np.argsort(-cos[js], kind="stable")[:sess_fill]]]
    return out


def diversity_penalty(rows: list, total: dict, w: float) -> dict:
    """A turn loses w x ln(1 + its rank among its session's pooled turns by the score so far): the
    best turn of each session keeps its score, the next ones of the same session fall by a little
    more each, so that a top 10 of ten turns of one session makes room for another session's (a
    question that needs two sessions). Ranks are taken within the pool, ties broken by id."""
    by_session: dict = {}
    for r in rows:
        if r.session_id is not None and r.id in total:
            by_session.setdefault(r.session_id, []).append(r.id)
    out: dict = {}
    for ids in by_session.values():
        for rank, i in enumerate(sorted(ids, key=lambda i: (-total[i], str(i)))):
            if rank:
                out[i] = -w * math.log1p(rank)
    return out
