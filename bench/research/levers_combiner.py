"""Lever 1: a learned linear combiner (ListNet, coordinate ascent) over per-row pool features,
fitted on four conversations and scored on the fifth."""

from __future__ import annotations

import numpy as np

from bench.quality.locomo import fit
from bench.research.levers_data import adjacent, bm25_vec, make_pool, summarise, zpool

# -- lever 1: a learned linear combiner over per-row pool features ------------------------------

FEATURES = (
    "zc",
    "zb",
    "sup",
    "sess",
    "sup_c",
    "sup_b",
    "sess_c",
    "sess_b",
    "sess2",
    "cover",
    "rare",
    "nmatch",
    "len",
    "rank_c",
    "rank_b",
    "only_c",
    "only_b",
    "zb_x_nq",
    "sup_any",
)
BASE_W = {"zc": 1.0, "zb": 1.0, "sup": 0.5, "sess": 0.5}  # the service's ranking in these features


def _neigh_max(d: dict, v: np.ndarray, inpool: np.ndarray) -> np.ndarray:
    """max over the in-pool adjacent turns (same session) of v; -inf where none."""
    prev, nxt = adjacent(d)
    out = np.full(len(v), -np.inf)
    for side in (prev, nxt):
        ok = side >= 0
        ok[ok] = inpool[side[ok]]
        out[ok] = np.maximum(out[ok], v[side[ok]])
    return out


def _sess_max(d: dict, v: np.ndarray, pool: np.ndarray, second: bool = False) -> np.ndarray:
    """Each pooled row's session's best (or second best) v over the pool."""
    sess = d["sess"][pool]
    vals = v[pool]
    out = np.zeros(len(pool))
    for x in np.unique(sess):
        m = sess == x
        srt = np.sort(vals[m])[::-1]
        out[m] = (srt[1] if len(srt) > 1 else 0.0) if second else srt[0]
    return out


def query_features(
    d: dict, qi: int, *, cos: np.ndarray | None = None, extra: dict | None = None, pool_size: int = fit.POOL, extra_pool: int = 30
) -> tuple[np.ndarray, np.ndarray, dict]:
    """(pool, evidence mask over the pool, {feature: values over the pool}) for one question.
    `cos`: another cosine (a contextual embedding); `extra`: {name: full-length score} features
    added z-normalised over the pool (and their session/neighbour maxima as name_sess/name_sup)."""
    q = d["qa"][qi]
    cos = d["E"] @ q["e"] if cos is None else cos
    terms = [t for t in dict.fromkeys(q["l"][:32])]
    bm = bm25_vec(d, set(terms))
    pool = make_pool(cos, bm, pool_size)
    for v in (extra or {}).values():  # an extra score's best rows join the pool (the vocabulary lift's do)
        pool = np.union1d(pool, [j for j in np.argsort(-v)[:extra_pool] if v[j] > 0]).astype(int)
    n = len(d["L"])
    inpool = np.zeros(n, dtype=bool)
    inpool[pool] = True
    zc, zb = zpool(cos, pool), zpool(bm, pool)
    f = zc + zb
    sup = np.maximum(_neigh_max(d, f, inpool), 0.0)
    g = f + 0.5 * sup
    F = {"zc": zc[pool], "zb": zb[pool], "sup": sup[pool], "sess": _sess_max(d, g, pool)}
    F["sup_c"] = np.maximum(_neigh_max(d, zc, inpool), 0.0)[pool]
    F["sup_b"] = np.maximum(_neigh_max(d, zb, inpool), 0.0)[pool]
    F["sess_c"] = _sess_max(d, zc, pool)
    F["sess_b"] = _sess_max(d, zb, pool)
    F["sess2"] = _sess_max(d, g, pool, second=True)
    qidx = [d["vix"][t] for t in terms if t in d["vix"]]
    mass = float(d["idf"][qidx].sum()) if qidx else 0.0
    F["cover"] = bm[pool] / mass if mass else np.zeros(len(pool))
    if qidx:
        rarest = qidx[int(np.argmax(d["idf"][qidx]))]
        F["rare"] = d["X"][pool, rarest].astype(float)
        F["nmatch"] = d["X"][np.ix_(pool, qidx)].sum(1) / len(qidx)
    else:
        F["rare"] = F["nmatch"] = np.zeros(len(pool))
    ln = d["X"].sum(1)
    F["len"] = np.log1p(ln[pool]) - np.log1p(ln).mean()
    rc = np.empty(n)
    rc[np.argsort(-cos, kind="stable")] = np.arange(n)
    rb = np.empty(n)
    rb[np.argsort(-bm, kind="stable")] = np.arange(n)
    F["rank_c"] = 1 / np.log2(rc[pool] + 2)
    F["rank_b"] = np.where(bm[pool] > 0, 1 / np.log2(rb[pool] + 2), 0.0)
    F["only_c"] = (bm[pool] <= 0).astype(float)
    F["only_b"] = (rc[pool] >= pool_size).astype(float)
    F["zb_x_nq"] = zb[pool] * (len(qidx) - 4) / 4
    F["sup_any"] = np.maximum(_neigh_max(d, f, np.ones(n, dtype=bool)), 0.0)[pool]  # neighbours outside the pool too
    for name, v in (extra or {}).items():
        zv = zpool(v, pool)
        F[name] = zv[pool]
        F[name + "_pos"] = np.maximum(zv[pool], 0.0)
        F[name + "_sup"] = np.maximum(_neigh_max(d, zv, inpool), 0.0)[pool]
        F[name + "_sess"] = _sess_max(d, zv, pool)
    ev = np.isin(pool, d["evix"][qi])
    return pool, ev, F


def feature_table(data: list[dict], extra_fn=None, **kw) -> list[dict]:
    """query_features for every question; extra_fn(d, qi) -> {name: full-length score}."""
    out = []
    for _di, d in enumerate(data):
        for qi, q in enumerate(d["qa"]):
            pool, ev, F = query_features(d, qi, extra=extra_fn(d, qi) if extra_fn else None, **kw)
            out.append(
                {"sid": d["sid"], "cat": q["cat"], "pool": pool, "ev": ev, "F": F, "n_ev": len(d["evix"][qi]), "n": len(d["L"])}
            )
    return out


def _mat(rows: list[dict], names: tuple[str, ...]) -> list[np.ndarray]:
    return [np.stack([r["F"][x] for x in names], 1) for r in rows]


def fit_listwise(
    rows: list[dict], names: tuple[str, ...], l2: float = 1.0, temp: float = 1.0, init: dict | None = None
) -> np.ndarray:
    """Linear weights minimising the softmax cross-entropy of the evidence rows over each
    question's pool (ListNet with the evidence as the target distribution), L2 towards `init`
    (the service's weights by default): convex, scipy's L-BFGS."""
    from scipy.optimize import minimize

    Xs = _mat(rows, names)
    Ys = [r["ev"].astype(float) / max(r["ev"].sum(), 1) for r in rows]
    keep = [i for i, r in enumerate(rows) if r["ev"].any()]
    w0 = np.array([(init or BASE_W).get(x, 0.0) for x in names])

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        tot, grad = 0.0, np.zeros_like(w)
        for i in keep:
            s = Xs[i] @ w / temp
            s = s - s.max()
            p = np.exp(s)
            p /= p.sum()
            tot -= float(Ys[i] @ np.log(p + 1e-300))
            grad += Xs[i].T @ (p - Ys[i]) / temp
        tot /= len(keep)
        grad /= len(keep)
        diff = w - w0
        return tot + l2 * float(diff @ diff) / 2, grad + l2 * diff

    return minimize(loss, w0, jac=True, method="L-BFGS-B").x


def rank_recall(rows: list[dict], names: tuple[str, ...], w: np.ndarray, ks=(5, 10, 25)) -> list:
    out = []
    for r, X in zip(rows, _mat(rows, names)):
        s = X @ w
        order = np.argsort(-s, kind="stable")
        out.append((r["sid"], r["cat"], {k: float(r["ev"][order[:k]].sum()) / r["n_ev"] for k in ks}))
    return out


def coord_ascent(
    rows: list[dict],
    names: tuple[str, ...],
    w0: np.ndarray,
    k: int = 10,
    rounds: int = 3,
    steps=(-0.5, -0.25, -0.1, 0.1, 0.25, 0.5),
) -> np.ndarray:
    """Direct search on mean recall@k (the weight of the first feature stays fixed: scale)."""
    Xs = _mat(rows, names)
    ev = [r["ev"] for r in rows]
    nev = np.array([r["n_ev"] for r in rows])

    def obj(w: np.ndarray) -> float:
        tot = 0.0
        for X, e, m in zip(Xs, ev, nev):
            s = X @ w
            top = np.argpartition(-s, k)[:k] if len(s) > k else np.arange(len(s))
            tot += e[top].sum() / m
        return tot / len(Xs)

    w, best = w0.copy(), obj(w0)
    for _ in range(rounds):
        improved = False
        for j in range(1, len(w)):
            for st in steps:
                w2 = w.copy()
                w2[j] += st
                v = obj(w2)
                if v > best + 1e-9:
                    w, best, improved = w2, v, True
        if not improved:
            break
    return w


def loo(rows: list[dict], names: tuple[str, ...], fitter, ks=(5, 10, 25)) -> tuple[dict, dict, dict]:
    """(held-out summary, fit-on-all summary, {sid: weights}) for fitter(train_rows) -> weights."""
    sids = sorted({r["sid"] for r in rows})
    held, ws = [], {}
    for sid in sids:
        w = fitter([r for r in rows if r["sid"] != sid])
        ws[sid] = w
        held += rank_recall([r for r in rows if r["sid"] == sid], names, w, ks)
    w_all = fitter(rows)
    ws["all"] = w_all
    return summarise(held, ks), summarise(rank_recall(rows, names, w_all, ks), ks), ws
