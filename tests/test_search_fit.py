"""The offline fit (bench/quality/locomo/fit.py) scores with the service's signals, and the
vectorised neighbour and session signals it keeps for bench/research/levers.py agree with them."""

from __future__ import annotations

import numpy as np

from bench.quality.locomo import fit


def _conversation(seed: int) -> tuple[dict, dict]:
    """A synthetic conversation as fit.features() gives one: unit embeddings, lexeme sets, sessions."""
    rng = np.random.default_rng(seed)
    n, vocab = 60, [f"w{i}" for i in range(40)]
    e = rng.normal(size=(n, 8))
    lx = [set(rng.choice(vocab, size=int(rng.integers(1, 6)), replace=False)) for _ in range(n)]
    df: dict = {}
    for s in lx:
        for x in s:
            df[x] = df.get(x, 0) + 1
    d = {
        "sid": "c",
        "dia": [f"D{i}" for i in range(n)],
        "sess": np.repeat(np.arange(6), 10),
        "E": e / np.linalg.norm(e, axis=1, keepdims=True),
        "L": lx,
        "df": df,
    }
    qe = rng.normal(size=8)
    q = {"e": qe / np.linalg.norm(qe), "l": list(rng.choice(vocab, size=3, replace=False)), "ev": ["D1"], "cat": 1}
    return d, q


def test_the_numpy_context_signals_agree_with_the_service_signals():
    for seed in range(5):
        d, q = _conversation(seed)
        old = fit.POOL
        fit.POOL = 25  # a pool smaller than the conversation, so "outside the pool" is exercised
        try:
            s = fit.score(d, q, **fit.DEFAULT)
            cos, bm = d["E"] @ q["e"], fit._bm25(d, set(q["l"]))
            pool = np.array(sorted(set(np.argsort(-cos)[: fit.POOL]) | {j for j in np.argsort(-bm)[: fit.POOL] if bm[j] > 0}))
        finally:
            fit.POOL = old

        def z(x: np.ndarray, pool: np.ndarray = pool) -> np.ndarray:
            return (x - x[pool].mean()) / x[pool].std()

        ref = fit._context(d, fit.DEFAULT["w_vector"] * z(cos) + z(bm), pool, fit.DEFAULT["neighbour"], fit.DEFAULT["session"])
        assert np.isfinite(s).sum() == len(pool)
        assert np.allclose(s[pool], ref[pool], atol=1e-9)
        assert list(np.argsort(-s, kind="stable")[:10]) == list(np.argsort(-ref, kind="stable")[:10])


def test_the_second_round_joins_as_the_service_lift():
    """With the second round on, its rows join the pool and the ranking changes only through them."""
    d, q = _conversation(7)
    plain = fit.score(d, q, **fit.DEFAULT)
    second = fit.score(d, q, **fit.DEFAULT, **fit.DEFAULT2)
    assert np.isfinite(second).sum() >= np.isfinite(plain).sum()
