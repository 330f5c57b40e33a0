"""Offline fit of the hybrid ranking weights on LoCoMo dev, with leave-one-conversation-out.

    .venv/bin/python -m bench.quality.locomo.fit [--data PATH] [--second-round]

The service's fusion run offline over every turn of each conversation's user, so that a grid of
weights costs a minute instead of a service run per point: cosine (the configured embedder, or
`--model`) and BM25 with binary term frequency over Postgres's own `to_tsvector('english',
...)` lexemes (the embedded server computes them) are computed here in numpy; the pool (vector
top-100 and text top-100) is then scored by the service's own signals (app.search.signals.fuse:
z-scores, the neighbour and session signals), and with `--second-round` the second retrieval
round (rare words of the best turns) joins as the service's `second_round` lift.
`_context` is a vectorised form of the neighbour and session signals for bench/research/levers.py
(tests/test_search_fit.py checks it against the service's).
For each held-out conversation the grid point best on the other four is scored on it; "fit on
all" is the point best on all five. Recall@10 by LoCoMo's evidence rule.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
from collections import Counter

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

POOL = 100
GRID = {"w_vector": (0.5, 1.0, 1.5, 2.0, 3.0), "neighbour": (0.0, 0.3, 0.5, 0.8), "session": (0.0, 0.3, 0.5, 0.8)}
# --second-round: the fusion weights at their defaults, the second round's settings on a grid
# (expand_terms 0 is the round off)
GRID2 = {"expand_from": (3, 5, 8), "expand_terms": (0, 10, 15), "expand_weight": (0.15, 0.3, 0.5)}
DEFAULT = {"w_vector": 1.0, "neighbour": 0.5, "session": 0.5}
DEFAULT2 = {"expand_from": 5, "expand_terms": 10, "expand_weight": 0.3}


def features(convs, model: str | None = None) -> list[dict]:
    from sqlalchemy import create_engine, text

    from app.config import Settings
    from app.kit.database.pg import admin_url
    from app.kit.runtime.embedding import make_embedder

    eng, emb = create_engine(admin_url(Settings())), make_embedder(Settings(), model)

    def lexemes(texts: list[str]) -> list[set[str]]:
        with eng.connect() as c:
            rows = c.execute(
                text(
                    "SELECT ord, tsvector_to_array(to_tsvector('english', t)) "
                    "FROM unnest(CAST(:ts AS text[])) WITH ORDINALITY AS x(t, ord)"
                ),
                {"ts": texts},
            ).all()
        out: list[set[str]] = [set()] * len(texts)
        for o, lex in rows:
            out[o - 1] = set(lex)
        return out

    data = []
    for c in convs:
        e = emb.embed([t.text for t in c.turns])
        qe = emb.embed_queries([q.question for q in c.qa])
        ql = [list(x) for x in lexemes([q.question for q in c.qa])]
        lx = lexemes([t.text for t in c.turns])
        data.append(
            {
                "sid": c.sample_id,
                "dia": [t.dia_id for t in c.turns],
                "sess": np.array([t.session for t in c.turns]),
                "E": e / np.linalg.norm(e, axis=1, keepdims=True),
                "L": lx,
                "df": Counter(x for s in lx for x in s),
                "qa": [
                    {"e": qe[i] / np.linalg.norm(qe[i]), "l": ql[i], "ev": q.evidence, "cat": q.category}
                    for i, q in enumerate(c.qa)
                ],
            }
        )
    eng.dispose()
    return data


def _bm25(d: dict, terms: set) -> np.ndarray:
    n = len(d["L"])
    w = {x: math.log(1 + (n - d["df"].get(x, 0) + 0.5) / (d["df"].get(x, 0) + 0.5)) for x in terms}
    return np.array([sum(w[x] for x in s if x in w) for s in d["L"]])


def _context(
    d: dict, f: np.ndarray, pool: np.ndarray, neighbour: float, session: float, unsupported: np.ndarray | None = None
) -> np.ndarray:
    n = len(d["L"])
    s = np.full(n, -np.inf)
    s[pool] = f[pool]
    sess = d["sess"]
    prev = np.r_[-np.inf, s[:-1]]
    prev[1:][sess[1:] != sess[:-1]] = -np.inf
    nxt = np.r_[s[1:], -np.inf]
    nxt[:-1][sess[1:] != sess[:-1]] = -np.inf
    support = np.maximum(np.maximum(prev, nxt), 0.0)
    if unsupported is not None:  # the second round's rows: no neighbour lookup of their own
        support[unsupported] = 0.0
    s = s + neighbour * support
    best = {x: s[sess == x].max() for x in np.unique(sess)}
    return s + session * np.array([best[x] if np.isfinite(best[x]) else 0.0 for x in sess])


def score(
    d: dict,
    q: dict,
    w_vector: float = 1.0,
    neighbour: float = 0.5,
    session: float = 0.5,
    expand_from: int = 5,
    expand_terms: int = 0,
    expand_weight: float = 0.0,
    expand_depth: int = 30,
) -> np.ndarray:
    """The service's fusion (app.search.signals.fuse, the vocabulary lift, length prior and time
    window off) over this conversation's pool: -inf outside the pool."""
    from dataclasses import replace

    from app.search.signals import fuse
    from app.search.tuning import DEFAULT_TUNING

    tuning = replace(
        DEFAULT_TUNING,
        w_vector=w_vector,
        neighbour=neighbour,
        session=session,
        vocab_terms=0,
        vocab_weight=0.0,
        length_prior=0.0,
        time_weight=0.0,
    )
    cos = d["E"] @ q["e"]
    bm = _bm25(d, set(q["l"][:32]))
    pool = sorted({int(j) for j in np.argsort(-cos)[:POOL]} | {int(j) for j in np.argsort(-bm)[:POOL] if bm[j] > 0})
    first = _pool(d, cos, bm, pool, pairs=_pairs(d, pool))
    total, _ = fuse(first, tuning)
    if expand_terms and expand_weight:
        # the second round (app/search/repository/expansion.py): the rarest words of the best turns
        n = len(d["L"])
        idf = {x: math.log(1 + (n - c + 0.5) / (c + 0.5)) for x, c in d["df"].items()}
        seeds = sorted(total, key=lambda j: (-total[j], j))[:expand_from]
        words = {x for j in seeds for x in d["L"][j] if x not in set(q["l"]) and d["df"].get(x, 0) >= 2}
        terms = sorted(words, key=lambda x: (-idf[x], x))[:expand_terms]
        bm2 = _bm25(d, set(terms))
        found = [int(j) for j in np.argsort(-bm2, kind="stable")[:expand_depth] if bm2[j] > 0]
        if found:
            rows = first.rows + [_Row(j, cos[j], d["sess"][j]) for j in found if j not in total]
            lifts = {"second_round": {j: float(bm2[j]) for j in found}}
            total, _ = fuse(replace(first, rows=rows, lifts=lifts), replace(tuning, expand_weight=expand_weight))
    s = np.full(len(d["L"]), -np.inf)
    for j, v in total.items():
        s[j] = v
    return s


class _Row:
    """A pooled turn as app.search.signals reads one (id: the turn's index)."""

    __slots__ = ("id", "d", "session_id", "n_lex")

    def __init__(self, j: int, cos: float, sess) -> None:
        self.id, self.d, self.session_id, self.n_lex = int(j), 1.0 - float(cos), int(sess), 0


def _pool(d: dict, cos: np.ndarray, bm: np.ndarray, pool: list, pairs: list):
    from app.search.signals import Pool

    return Pool(
        rows=[_Row(j, cos[j], d["sess"][j]) for j in pool],
        bm25={int(j): float(bm[j]) for j in pool if bm[j] > 0},
        pairs=pairs,
        turns=True,
    )


def _pairs(d: dict, pool: list) -> list[tuple[int, int]]:
    """(neighbour, turn) for the turns just before and after each pooled turn in its session, as
    the service's neighbour lookup gives them."""
    sess, n = d["sess"], len(d["L"])
    return [(j + o, j) for j in pool for o in (-1, 1) if 0 <= j + o < n and sess[j + o] == sess[j]]


def recall10(d: dict, q: dict, s: np.ndarray) -> float:
    top = {d["dia"][j] for j in np.argsort(-s, kind="stable")[:10] if np.isfinite(s[j])}
    return sum(e in top for e in q["ev"]) / len(q["ev"])


def context_chosen(s: np.ndarray, sess: np.ndarray, budget: int, piece, fit, count) -> set[int]:
    """The turns (indices) a `budget`-token context holds for the scores `s`, as
    app.context.service.retrieved_pieces builds it: the top budget // 30 turns at their logistic
    score and their neighbours at half of it, through app.context.assemble.fit (`fit`, `count`);
    `piece(j, score)` makes turn j's piece."""
    from app.context.service import NEIGHBOUR_WEIGHT, candidates
    from app.search.tuning import DEFAULT_TUNING

    top = [j for j in np.argsort(-s, kind="stable")[: candidates(budget)] if np.isfinite(s[j])]
    sc = {j: 1 / (1 + math.exp(-s[j] / DEFAULT_TUNING.squash_scale)) for j in top}
    nb: dict = {}
    for j in top:
        for o in (-1, 1):
            if 0 <= j + o < len(s) and sess[j + o] == sess[j] and j + o not in sc:
                nb[j + o] = max(nb.get(j + o, 0.0), sc[j] * NEIGHBOUR_WEIGHT)
    return {int(p.id) for p in fit([piece(j, v) for j, v in {**sc, **nb}.items()], budget, count)}


def in_context(data: list[dict], budgets: tuple[int, ...] = (1000, 1800)) -> dict:
    """The service's own `fit` and `render` (SmolLM2 token counts) over this ranking: the top
    budget // 30 turns at their logistic score and their neighbours at half of it, as
    app.context.service.retrieved_pieces builds them; evidence counted among the chosen pieces."""
    from app.config import Settings
    from app.context.assemble import Piece, fit
    from app.llm.gateway import Gateway
    from bench.quality.locomo.data import load

    settings = Settings()
    count = Gateway(settings.llm_model, data_dir=settings.data_dir).count_tokens
    turns = {c.sample_id: c.turns for c in load()}
    out = {}
    for name, kw in (("second round off", {}), ("second round on", DEFAULT2)):
        got = {b: [] for b in budgets}
        for d in data:
            ts = turns[d["sid"]]

            def piece(j: int, sc: float, ts=ts, sid=d["sid"]) -> Piece:
                at = ts[j].at.isoformat() + "+00:00" if ts[j].at else None
                return Piece(
                    "examples",
                    "episode",
                    str(j),
                    ts[j].text,
                    sc,
                    extra={"kind": "conversation", "session_id": f"{sid}-s{ts[j].session}", "occurred_at": at},
                )

            for q in d["qa"]:
                s = score(d, q, **DEFAULT, **kw)
                for b in budgets:
                    chosen = context_chosen(s, d["sess"], b, piece, fit, count)
                    got[b].append(sum(d["dia"].index(e) in chosen for e in q["ev"] if e in d["dia"]) / len(q["ev"]))
        out[name] = {b: round(float(np.mean(v)), 4) for b, v in got.items()}
        print(f"{name}: in context {out[name]}", flush=True)
    return out


def fit(data: list[dict], *, second_round: bool = False) -> dict:
    """The grid's leave-one-conversation-out fit over `features()`'s data (GRID, or GRID2 with
    `second_round`): the point best on all, and each held-out conversation's score at the point
    best on the others."""
    space, fixed = (GRID2, DEFAULT) if second_round else (GRID, {"expand_terms": 0})
    grid = [dict(zip(space, p)) for p in itertools.product(*space.values())]
    per = {(i, d["sid"]): [recall10(d, q, score(d, q, **fixed, **g)) for q in d["qa"]] for i, g in enumerate(grid) for d in data}
    sids = [d["sid"] for d in data]

    def mean_on(i: int, keep) -> float:
        return float(np.mean([r for s in sids if keep(s) for r in per[(i, s)]]))

    def best_without(sid: str) -> int:
        """The grid point with the best recall@10 on every conversation but `sid`."""
        return max(range(len(grid)), key=lambda i: mean_on(i, lambda s: s != sid))

    best_all = max(range(len(grid)), key=lambda i: mean_on(i, lambda s: True))
    held, cats, chosen = [], [], {}
    for sid, d in zip(sids, data):
        i = best_without(sid)
        chosen[sid] = grid[i]
        held += per[(i, sid)]
        cats += [q["cat"] for q in d["qa"]]
    default = grid.index(DEFAULT2 if second_round else DEFAULT)
    out = {
        "fit_on_all": grid[best_all],
        "fit_on_all_recall@10": round(mean_on(best_all, lambda s: True), 4),
        "loo_recall@10": round(float(np.mean(held)), 4),
        "loo_by_category": {c: round(float(np.mean([r for r, k in zip(held, cats) if k == c])), 4) for c in sorted(set(cats))},
        "loo_chosen": chosen,
        "default_recall@10": round(mean_on(default, lambda s: True), 4),
        "default_per_conversation": {s: round(mean_on(default, lambda x, s=s: x == s), 4) for s in sids},
    }
    return out


def main(argv: list[str] | None = None) -> dict:
    from bench.quality.locomo.data import load

    ap = argparse.ArgumentParser(
        prog="python -m bench.quality.locomo.fit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=None)
    ap.add_argument("--model", default=None, help="embedding model (default: the configured MEMSCALE_EMBEDDING_MODEL)")
    ap.add_argument(
        "--second-round",
        action="store_true",
        help="fit the second round's settings (GRID2) instead of the fusion weights (GRID, with the second round off)",
    )
    ap.add_argument(
        "--context",
        action="store_true",
        help="evidence in context at 1,000 and 1,800 tokens "
        "through app.context.assemble.fit, second round off and on (no fitting)",
    )
    args = ap.parse_args(argv)
    data = features(load(args.data) if args.data else load(), args.model)
    if args.context:
        return in_context(data)
    out = fit(data, second_round=args.second_round)
    for k, v in out.items():
        print(f"{k}: {v}")
    return out


if __name__ == "__main__":
    main()
