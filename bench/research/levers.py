"""Offline search for ranking levers on LoCoMo dev (evidence recall), leave-one-conversation-out.

    nice -n 10 .venv/bin/python -m bench.research.levers [--cache /tmp/levers]
        [--only base,len,vocab,together,org,ctxemb,combiner,context,cost]

Reuses bench.locomo_bench.fit (the numpy copy of app.search's hybrid ranking: pool of vector
top-100 + text top-100, z-scores, neighbour and session signals, the second round). Everything
slow (embeddings of turns, questions, contextual variants and vocabulary words; Postgres lexemes)
is computed once and cached under --cache (np.save / pickle): the first run embeds for ~10
minutes on one torch thread, later runs take a few minutes. Each conversation is one user's
visible rows: every statistic (df, N, z-scores, the vocabulary) is taken over that conversation.

Levers (the table printed; also written to <cache>/report.json):
  base      the service's ranking (fit.score's defaults), and with the second round
  len       a length prior: + beta x (log(1 + lexemes in the row) - its mean), before or after the
            context signals (tsvector length(); no extra data)
  vocab     semantic expansion of BM25: the m vocabulary lexemes nearest to the question's
            embedding (one embedding per distinct lexeme of the user's rows, made at ingest; the
            question's own lexemes left out; similarity > tau), BM25 with weight sim x IDF; its
            top 30 rows join the pool and w x the positive part of its z-score adds to the fused
            score (as the second round's does)
  together  vocab + len, without and with the second round
  org       the same with one org-wide vocabulary table: its `fetch` nearest lexemes, of those the
            5 nearest that the caller's rows hold
  ctxemb    one contextual embedding replacing the turn's own: previous turn + turn, session date +
            turn, both
  combiner  a linear combiner (ListNet: softmax cross-entropy of the evidence over the pool, L2 to
            the hand-set weights) over per-row features, fitted on 4 conversations, scored on the 5th
  context   evidence in a 1,000 / 1,800-token context through app.context.assemble.fit
  cost      embedding time per turn / per word side by side, the vocabulary's growth, and the BM25
            statement's time with and without the lift in a scratch database (dropped after)
Every grid is scored with leave-one-conversation-out (chosen on four, scored on the fifth) and fit
on all five; recall@5/10/25 by LoCoMo's evidence rule, overall and per category.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import pickle
import re
import time
from collections import Counter
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.locomo_bench import fit  # noqa: E402

CATS = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*[A-Za-z]|[A-Za-z]|\d+")

_EMB = None
_ENG = None


def embedder():  # noqa: ANN201
    global _EMB
    if _EMB is None:
        import torch

        torch.set_num_threads(1)
        from app.kit.embedding import LocalEmbedder

        _EMB = LocalEmbedder()
    return _EMB


def engine():  # noqa: ANN201
    global _ENG
    if _ENG is None:
        from sqlalchemy import create_engine

        from app.config import Settings
        from app.kit.pg import admin_url

        _ENG = create_engine(admin_url(Settings()))
    return _ENG


def lexemes(texts: list[str]) -> list[list[str]]:
    """Postgres's own to_tsvector('english', ...) lexemes, in tsvector order."""
    from sqlalchemy import text

    out: list[list[str]] = [[] for _ in texts]
    with engine().connect() as c:
        for start in range(0, len(texts), 5000):
            chunk = texts[start:start + 5000]
            rows = c.execute(text("SELECT ord, tsvector_to_array(to_tsvector('english', t)) "
                                  "FROM unnest(CAST(:ts AS text[])) WITH ORDINALITY AS x(t, ord)"), {"ts": chunk}).all()
            for o, lex in rows:
                out[start + o - 1] = list(lex)
    return out


def cached(path: Path, make):  # noqa: ANN001, ANN201
    if path.exists():
        with path.open("rb") as f:
            return pickle.load(f)
    v = make()
    with path.open("wb") as f:
        pickle.dump(v, f)
    return v


def embed_cached(path: Path, texts: list[str]) -> tuple[np.ndarray, float]:
    """(L2-normalised embeddings, seconds it took when first computed)."""
    npy, tim = path.with_suffix(".npy"), path.with_suffix(".time")
    if npy.exists():
        return np.load(npy), float(tim.read_text()) if tim.exists() else float("nan")
    t0 = time.perf_counter()
    e = embedder().embed(texts)
    dt = time.perf_counter() - t0
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    np.save(npy, e)
    tim.write_text(str(dt))
    return e, dt


# -- data -----------------------------------------------------------------------------------


def build(cache: Path) -> list[dict]:
    """fit.features()'s dicts, cached, plus what the levers need: texts, a lexeme incidence
    matrix over the conversation's vocabulary, speakers and session dates."""
    from bench.quality.locomo.data import load

    cache.mkdir(parents=True, exist_ok=True)
    convs = load()
    data = []
    for c in convs:
        sid = c.sample_id
        texts = [t.text for t in c.turns]
        qs = [q.question for q in c.qa]
        lx = cached(cache / f"lex_{sid}.pkl", lambda texts=texts: lexemes(texts))
        ql = cached(cache / f"qlex_{sid}.pkl", lambda qs=qs: lexemes(qs))
        E, _ = embed_cached(cache / f"E_{sid}", texts)
        QE, _ = embed_cached(cache / f"QE_{sid}", qs)
        L = [set(x) for x in lx]
        vocab = sorted(set().union(*L))
        vix = {w: i for i, w in enumerate(vocab)}
        X = np.zeros((len(L), len(vocab)), dtype=np.float32)
        for j, s in enumerate(L):
            X[j, [vix[w] for w in s]] = 1.0
        df = X.sum(0)
        n = len(L)
        idf = np.log(1 + (n - df + .5) / (df + .5)).astype(np.float32)
        d = {"sid": sid, "dia": [t.dia_id for t in c.turns], "sess": np.array([t.session for t in c.turns]),
             "E": E, "L": L, "df": Counter(x for s in L for x in s), "texts": texts, "turns": c.turns,
             "vocab": vocab, "vix": vix, "X": X, "idf": idf,
             "qa": [{"e": QE[i], "l": ql[i], "ev": q.evidence, "cat": q.category, "q": q.question}
                    for i, q in enumerate(c.qa)]}
        d["evix"] = [np.array([d["dia"].index(e) for e in q["ev"]]) for q in d["qa"]]
        data.append(d)
    return data


# -- a vectorised copy of fit.score -----------------------------------------------------------


def bm25_vec(d: dict, terms, weights=None) -> np.ndarray:  # noqa: ANN001
    """Binary-tf BM25 (fit._bm25) over the lexeme matrix; `weights`: a factor per term."""
    idx = [d["vix"][t] for t in terms if t in d["vix"]]
    if not idx:
        return np.zeros(len(d["L"]), dtype=np.float64)
    w = d["idf"][idx].astype(np.float64)
    if weights is not None:
        wt = {t: x for t, x in zip(terms, weights)}
        w = w * np.array([wt[t] for t in terms if t in d["vix"]])
    return d["X"][:, idx].astype(np.float64) @ w


def zpool(x: np.ndarray, pool: np.ndarray) -> np.ndarray:
    return (x - x[pool].mean()) / (x[pool].std() + 1e-9)


def make_pool(cos: np.ndarray, bm: np.ndarray, size: int = fit.POOL) -> np.ndarray:
    return np.array(sorted(set(np.argsort(-cos)[:size]) | {j for j in np.argsort(-bm)[:size] if bm[j] > 0}))


def topk(s: np.ndarray, k: int) -> np.ndarray:
    return np.array([j for j in np.argsort(-s, kind="stable")[:k] if np.isfinite(s[j])], dtype=int)


def recall_at(q_ev: np.ndarray, s: np.ndarray, ks=(5, 10, 25)) -> dict:
    order = np.argsort(-s, kind="stable")
    fin = np.isfinite(s)
    out = {}
    for k in ks:
        top = set(int(j) for j in order[:k] if fin[j])
        out[k] = sum(int(e) in top for e in q_ev) / len(q_ev)
    return out


def evaluate(data: list[dict], scorer, ks=(5, 10, 25)) -> dict:  # noqa: ANN001
    """{'all': {k: r}, 'multi-hop': ..., per conversation 'conv-26': ...} of scorer(d, qi) -> scores."""
    rows = []
    for d in data:
        for qi, q in enumerate(d["qa"]):
            rows.append((d["sid"], q["cat"], recall_at(d["evix"][qi], scorer(d, qi), ks)))
    return summarise(rows, ks)


def summarise(rows: list, ks=(5, 10, 25)) -> dict:
    out = {}
    groups = {"all": rows, **{CATS[c]: [r for r in rows if r[1] == c] for c in CATS}}
    for sid in sorted({r[0] for r in rows}):
        groups[sid] = [r for r in rows if r[0] == sid]
    for name, rs in groups.items():
        out[name] = {k: float(np.mean([r[2][k] for r in rs])) for k in ks}
    out["_rows"] = rows
    return out


def fmt(name: str, res: dict, ks=(5, 10, 25)) -> str:
    cells = [f"{name:<38}"]
    for g in ("all", *CATS.values()):
        cells.append("/".join(f"{res[g][k]:.3f}" for k in ks))
    return " | ".join(cells)


HEADER = f"{'lever':<38} | " + " | ".join(f"{g + ' @5/10/25':<17}" for g in ("all", *CATS.values()))


def base_scorer(**kw):  # noqa: ANN003, ANN201
    return lambda d, qi: fit.score(d, d["qa"][qi], **{**fit.DEFAULT, **kw})


# -- lever 1: a learned linear combiner over per-row pool features ------------------------------

FEATURES = ("zc", "zb", "sup", "sess", "sup_c", "sup_b", "sess_c", "sess_b", "sess2", "cover", "rare",
            "nmatch", "len", "rank_c", "rank_b", "only_c", "only_b", "zb_x_nq", "sup_any")
BASE_W = {"zc": 1.0, "zb": 1.0, "sup": 0.5, "sess": 0.5}  # the service's ranking in these features


def _adjacent(d: dict) -> tuple[np.ndarray, np.ndarray]:
    if "prev" not in d:
        n, sess = len(d["L"]), d["sess"]
        prev, nxt = np.arange(n) - 1, np.arange(n) + 1
        prev[0], nxt[-1] = -1, -1
        prev[1:][sess[1:] != sess[:-1]] = -1
        nxt[:-1][sess[1:] != sess[:-1]] = -1
        d["prev"], d["next"] = prev, nxt
    return d["prev"], d["next"]


def _neigh_max(d: dict, v: np.ndarray, inpool: np.ndarray) -> np.ndarray:
    """max over the in-pool adjacent turns (same session) of v; -inf where none."""
    prev, nxt = _adjacent(d)
    out = np.full(len(v), -np.inf)
    for side in (prev, nxt):
        ok = (side >= 0)
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


def query_features(d: dict, qi: int, *, cos: np.ndarray | None = None, extra: dict | None = None,
                   pool_size: int = fit.POOL, extra_pool: int = 30) -> tuple[np.ndarray, np.ndarray, dict]:
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
    rc = np.empty(n); rc[np.argsort(-cos, kind="stable")] = np.arange(n)
    rb = np.empty(n); rb[np.argsort(-bm, kind="stable")] = np.arange(n)
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


def feature_table(data: list[dict], extra_fn=None, **kw) -> list[dict]:  # noqa: ANN001, ANN003
    """query_features for every question; extra_fn(d, qi) -> {name: full-length score}."""
    out = []
    for di, d in enumerate(data):
        for qi, q in enumerate(d["qa"]):
            pool, ev, F = query_features(d, qi, extra=extra_fn(d, qi) if extra_fn else None, **kw)
            out.append({"sid": d["sid"], "cat": q["cat"], "pool": pool, "ev": ev, "F": F,
                        "n_ev": len(d["evix"][qi]), "n": len(d["L"])})
    return out


def _mat(rows: list[dict], names: tuple[str, ...]) -> list[np.ndarray]:
    return [np.stack([r["F"][x] for x in names], 1) for r in rows]


def fit_listwise(rows: list[dict], names: tuple[str, ...], l2: float = 1.0, temp: float = 1.0,
                 init: dict | None = None) -> np.ndarray:
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


def coord_ascent(rows: list[dict], names: tuple[str, ...], w0: np.ndarray, k: int = 10, rounds: int = 3,
                 steps=(-.5, -.25, -.1, .1, .25, .5)) -> np.ndarray:
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


def loo(rows: list[dict], names: tuple[str, ...], fitter, ks=(5, 10, 25)) -> tuple[dict, dict, dict]:  # noqa: ANN001
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


# -- embeddings for levers 2 and 3 (cached) ------------------------------------------------------


def ctx_texts(d: dict, variant: str) -> list[str]:
    """Contextual texts for one embedding per turn that replaces the turn's own:
    prev   the previous turn of the session, then this turn (known when the turn is ingested)
    date   the session date, then this turn
    pdate  the session date, the previous turn, this turn"""
    prev, _ = _adjacent(d)
    out = []
    for j, t in enumerate(d["turns"]):
        date = t.at.strftime("%-d %B %Y") if t.at else ""
        p = d["texts"][prev[j]] if prev[j] >= 0 else ""
        if variant == "prev":
            out.append(f"{p} {t.text}".strip())
        elif variant == "date":
            out.append(f"{date}: {t.text}" if date else t.text)
        elif variant == "pdate":
            out.append(f"{date}: {p} {t.text}".strip())
        else:
            raise ValueError(variant)
    return out


def word_lexemes(words: list[str]) -> dict[str, str | None]:
    """{surface word: its single english lexeme, or None (a stop word, or it splits)}."""
    lx = lexemes(words)
    return {w: (x[0] if len(x) == 1 else None) for w, x in zip(words, lx)}


def vocabulary(d: dict, cache: Path) -> dict:
    """The user's vocabulary: one surface word per lexeme of their rows (the most frequent word
    that Postgres reduces to it), with its embedding. What a per-org vocabulary table would hold."""
    def make() -> dict:
        counts = Counter(w.lower() for t in d["texts"] for w in WORD.findall(t))
        words = sorted(counts)
        lex = word_lexemes(words)
        best: dict[str, tuple[int, str]] = {}
        for w in words:
            x = lex[w]
            if x is not None and x in d["vix"] and (x not in best or counts[w] > best[x][0]):
                best[x] = (counts[w], w)
        lexs = sorted(best)
        return {"lex": lexs, "word": [best[x][1] for x in lexs], "n_surface": len(words)}

    v = cached(cache / f"vocab_{d['sid']}.pkl", make)
    v["W"], v["seconds"] = embed_cached(cache / f"W_{d['sid']}", v["word"])
    return v


def query_words(d: dict, cache: Path) -> list[dict]:
    """Per question: {lexeme: embedding of the question's surface word for it} (term-wise expansion)."""
    def make() -> list:
        out = []
        for q in d["qa"]:
            ws = list(dict.fromkeys(w.lower() for w in WORD.findall(q["q"])))
            out.append(ws)
        return out

    qws = cached(cache / f"qwords_{d['sid']}.pkl", make)
    allw = sorted({w for ws in qws for w in ws})
    lex = cached(cache / f"qwlex_{d['sid']}.pkl", lambda: word_lexemes(allw))
    QW, _ = embed_cached(cache / f"QW_{d['sid']}", allw)
    ix = {w: i for i, w in enumerate(allw)}
    return [{lex[w]: QW[ix[w]] for w in ws if lex.get(w)} for ws in qws]


def embed_all(data: list[dict], cache: Path, variants=("prev", "date")) -> dict:
    """Every cached embedding the levers use, with the time per turn of the plain and contextual
    texts measured side by side (interleaved per conversation, same process, one thread)."""
    times: dict[str, list[float]] = {"plain": [], **{v: [] for v in variants}}
    ntok: dict[str, int] = {k: 0 for k in times}
    tok = embedder()._model.tokenizer
    for d in data:
        for v in ("plain", *variants):
            texts = d["texts"] if v == "plain" else ctx_texts(d, v)
            ntok[v] += sum(min(256, len(x)) for x in tok(texts)["input_ids"])
            if v == "plain":  # a fresh timing of the plain texts, side by side with the variants
                path = cache / f"Eplain_{d['sid']}"
                if not path.with_suffix(".time").exists():
                    embed_cached(path, texts)
                times[v].append(float(path.with_suffix(".time").read_text()))
                continue
            d[f"E_{v}"], dt = embed_cached(cache / f"E{v}_{d['sid']}", texts)
            times[v].append(dt)
        vocabulary(d, cache)
        query_words(d, cache)
    n = sum(len(d["L"]) for d in data)
    return {v: {"ms_per_turn": 1000 * sum(t) / n, "tokens_per_turn": ntok[v] / n} for v, t in times.items()}


# -- leave-one-conversation-out over a grid of settings ----------------------------------------


def loo_grid(per_point: dict, ks=(5, 10, 25), k_select: int = 10) -> tuple[dict, dict, object, dict]:
    """per_point: {setting: rows (sid, cat, {k: recall})}. For each conversation the setting best
    (mean recall@k_select) on the other four is scored on it. Returns (held-out summary, fit-on-all
    summary, fit-on-all setting, {sid: chosen setting})."""
    first = next(iter(per_point.values()))
    sids = sorted({r[0] for r in first})

    def mean_on(p, keep) -> float:  # noqa: ANN001
        return float(np.mean([r[2][k_select] for r in per_point[p] if keep(r[0])]))

    pts = list(per_point)
    held, chosen = [], {}
    for sid in sids:
        p = max(pts, key=lambda p: (mean_on(p, lambda s: s != sid), -pts.index(p)))
        chosen[sid] = p
        held += [r for r in per_point[p] if r[0] == sid]
    best = max(pts, key=lambda p: (mean_on(p, lambda s: True), -pts.index(p)))
    return summarise(held, ks), summarise(per_point[best], ks), best, chosen


# -- a general scorer: the service's ranking with the levers' extra terms ----------------------


def length_prior(d: dict) -> np.ndarray:
    """log(1 + lexemes in the row) - its mean over the user's rows (tsvector's length())."""
    if "lenp" not in d:
        ln = d["X"].sum(1)
        d["lenp"] = np.log1p(ln) - np.log1p(ln).mean()
    return d["lenp"]


def ranked(d: dict, qi: int, *, cos: np.ndarray | None = None, bm: np.ndarray | None = None,
           lift: np.ndarray | None = None, w_lift: float = 0.0, lift_pool: int = 0, len_beta: float = 0.0,
           len_where: str = "fused", w_vector: float = 1.0, neighbour: float = 0.5, session: float = 0.5,
           pool_size: int = fit.POOL) -> np.ndarray:
    """fit.score's ranking (pool, z-scores, neighbour and session signals) with
    `cos`/`bm` replacing the cosine/BM25, `lift` a score whose positive z-part adds with `w_lift`
    (its top `lift_pool` rows join the pool, as the second round's do), and the length prior
    (len_where 'fused': added to the fused score before the context signals; 'final': after)."""
    q = d["qa"][qi]
    cos = d["E"] @ q["e"] if cos is None else cos
    bm = bm25_vec(d, set(q["l"][:32])) if bm is None else bm
    pool = make_pool(cos, bm, pool_size)
    if lift is not None and lift_pool:
        pool = np.union1d(pool, [j for j in np.argsort(-lift)[:lift_pool] if lift[j] > 0]).astype(int)
    f = w_vector * zpool(cos, pool) + zpool(bm, pool)
    if lift is not None and w_lift:
        f = f + w_lift * np.maximum(zpool(lift, pool), 0.0)
    if len_beta and len_where == "fused":
        f = f + len_beta * length_prior(d)
    s = fit._context(d, f, pool, neighbour, session)
    if len_beta and len_where == "final":
        s = s + len_beta * length_prior(d)
    return s


def per_question(data: list[dict], scorer, ks=(5, 10, 25)) -> list:  # noqa: ANN001
    return [(d["sid"], q["cat"], recall_at(d["evix"][qi], scorer(d, qi), ks))
            for d in data for qi, q in enumerate(d["qa"])]


# -- lever 2: semantic term expansion of BM25 from an embedded vocabulary ----------------------


def attach_vocab(data: list[dict], cache: Path) -> None:
    for d in data:
        if "V" in d:
            continue
        v = vocabulary(d, cache)
        d["V"] = {"lex": v["lex"], "word": v["word"], "W": v["W"], "col": np.array([d["vix"][x] for x in v["lex"]])}
        d["QW"] = query_words(d, cache)


def vocab_bm25(d: dict, qi: int, *, m: int = 10, mode: str = "query", tau: float = 0.0, gamma: float = 1.0,
               per_term: int = 3, max_df: float = 1.0, min_df: int = 1, max_cap: float = 1.0,
               agg: str = "idf") -> tuple[np.ndarray, list]:
    """BM25 over the expansion lexemes (weights sim^gamma over sims above tau, times their IDF)
    and the chosen (lexeme, sim). mode 'query': the m vocabulary words nearest to the question's
    embedding; 'term': for each question word, its `per_term` nearest vocabulary words (word to
    word cosine), m in all. The question's own lexemes are left out."""
    q, V = d["qa"][qi], d["V"]
    own = set(q["l"])
    n = len(d["L"])
    dfv = d["X"].sum(0)[V["col"]]
    ok = np.array([x not in own for x in V["lex"]]) & (dfv <= max_df * n) & (dfv >= min_df)
    if max_cap < 1.0:
        ok &= capitalised_share(d) <= max_cap
    if mode == "query":
        sim = V["W"] @ q["e"]
        sim[~ok] = -1
        top = [int(j) for j in np.argsort(-sim)[:m] if sim[j] > tau]
        chosen = [(V["lex"][j], float(sim[j])) for j in top]
    else:
        best: dict[int, float] = {}
        for lex, e in d["QW"][qi].items():
            sim = V["W"] @ e
            sim[~ok] = -1
            for j in np.argsort(-sim)[:per_term]:
                if sim[j] > tau:
                    best[int(j)] = max(best.get(int(j), 0.0), float(sim[j]))
        chosen = sorted(((V["lex"][j], s) for j, s in best.items()), key=lambda x: -x[1])[:m]
    if not chosen:
        return np.zeros(n), []
    cols = np.array([d["vix"][x] for x, _ in chosen])
    sims = np.array([max(s, 0.0) ** gamma for _, s in chosen])
    Xc = d["X"][:, cols].astype(np.float64)
    if agg == "max":  # a row's best expansion word (its similarity)
        return (Xc * sims).max(1), chosen
    if agg == "sim":  # summed similarities, no IDF
        return Xc @ sims, chosen
    return Xc @ (sims * d["idf"][cols]), chosen  # 'idf': similarity x IDF, summed (BM25 weights)


def capitalised_share(d: dict) -> np.ndarray:
    """Per vocabulary lexeme (d['V'] order): the share of its occurrences written capitalised
    where a sentence does not start (names: Charlotte, Nicole, Luna), counted at ingest."""
    if "cap" in d["V"]:
        return d["V"]["cap"]
    lex_of = cached_word_map(d)
    cap, tot = Counter(), Counter()
    for t in d["texts"]:
        body = t.split(": ", 1)[1] if ": " in t else t
        body = body.split(" [shared an image:", 1)[0]
        start = True
        for m in re.finditer(r"[A-Za-z][A-Za-z'\-]*|[.!?]", body):
            w = m.group(0)
            if w in ".!?":
                start = True
                continue
            x = lex_of.get(w.lower())
            if x is not None and not start:
                tot[x] += 1
                cap[x] += w[0].isupper()
            start = False
    d["V"]["cap"] = np.array([cap[x] / tot[x] if tot[x] else 0.0 for x in d["V"]["lex"]])
    return d["V"]["cap"]


def cached_word_map(d: dict) -> dict:
    """{lower-case surface word: lexeme} for the user's words (Postgres's stemming, cached)."""
    if "wordlex" not in d:
        counts = sorted({w.lower() for t in d["texts"] for w in WORD.findall(t)})
        path = Path(os.environ.get("LEVERS_CACHE", "/tmp/levers")) / f"wordlex_{d['sid']}.pkl"
        d["wordlex"] = {w: x for w, x in cached(path, lambda: word_lexemes(counts)).items() if x}
    return d["wordlex"]


# -- levers together: vocabulary lift + length prior (+ the second round) ----------------------


def combined(d: dict, qi: int, *, vocab: dict | None = None, w_vocab: float = 0.5, vocab_pool: int = 30,
             len_beta: float = 0.0, second: bool = False, expand_from: int = 5, expand_terms: int = 10,
             expand_weight: float = 0.3, expand_depth: int = 30, neighbour: float = 0.5,
             session: float = 0.5) -> np.ndarray:
    """The service's ranking + the vocabulary lift (`vocab`: vocab_bm25's settings, None: off)
    + the length prior (added to the final score) + the second round as fit.score has it
    (its seeds are the first round's best turns with the levers in)."""
    q = d["qa"][qi]
    cos = d["E"] @ q["e"]
    bm = bm25_vec(d, set(q["l"][:32]))
    lift = vocab_bm25(d, qi, **vocab)[0] if vocab is not None else None
    pool = make_pool(cos, bm)
    if lift is not None:
        pool = np.union1d(pool, [j for j in np.argsort(-lift)[:vocab_pool] if lift[j] > 0]).astype(int)

    def fused(pool: np.ndarray) -> np.ndarray:
        f = zpool(cos, pool) + zpool(bm, pool)
        if lift is not None and w_vocab:
            f = f + w_vocab * np.maximum(zpool(lift, pool), 0.0)
        return f

    lp = len_beta * length_prior(d) if len_beta else 0.0
    s = fit._context(d, fused(pool), pool, neighbour, session) + lp
    if not second:
        return s
    words = {x for j in np.argsort(-s, kind="stable")[:expand_from] for x in d["L"][j]
             if x not in set(q["l"]) and d["df"].get(x, 0) >= 2}
    terms = sorted(words, key=lambda x: (-d["idf"][d["vix"][x]], x))[:expand_terms]
    bm2 = bm25_vec(d, set(terms))
    added = np.array(sorted({j for j in np.argsort(-bm2)[:expand_depth] if bm2[j] > 0} - set(pool)), dtype=int)
    pool = np.array(sorted(set(pool) | set(added)))
    f = fused(pool) + expand_weight * np.maximum(zpool(bm2, pool), 0.0)
    return fit._context(d, f, pool, neighbour, session, added) + lp


def in_context(data: list[dict], scorer, budgets: tuple[int, ...] = (1000, 1800)) -> dict:  # noqa: ANN001
    """fit.in_context for any scorer(d, qi): the service's `fit` over the top budget // 30 turns
    at their logistic score and their neighbours at half of it. {budget: mean, 'cats': {...}}."""
    from app.config import Settings
    from app.context.assemble import Piece, fit as fit_pieces
    from app.llm.gateway import Gateway

    settings = Settings()
    count = Gateway(settings.llm_model, data_dir=settings.data_dir).count_tokens
    got = {b: [] for b in budgets}
    cats = []
    for d in data:
        ts = d["turns"]

        def piece(j: int, sc: float, ts=ts, sid=d["sid"]) -> Piece:  # noqa: ANN001
            at = ts[j].at.isoformat() + "+00:00" if ts[j].at else None
            return Piece("examples", "episode", str(j), ts[j].text, sc, extra={
                "kind": "conversation", "session_id": f"{sid}-s{ts[j].session}", "occurred_at": at})

        for qi, q in enumerate(d["qa"]):
            s = scorer(d, qi)
            cats.append(q["cat"])
            for b in budgets:
                chosen = fit.context_chosen(s, d["sess"], b, piece, fit_pieces, count)
                got[b].append(sum(int(e) in chosen for e in d["evix"][qi]) / len(d["evix"][qi]))
    cats = np.array(cats)
    out = {b: float(np.mean(v)) for b, v in got.items()}
    out["cats"] = {b: {CATS[c]: float(np.mean(np.array(v)[cats == c])) for c in CATS} for b, v in got.items()}
    return out


def org_vocabulary(data: list[dict]) -> dict:
    """All users' vocabularies as one per-org table (one row per lexeme): what the service would
    store. The levers' own figures use each user's vocabulary; this measures the difference of
    taking the org's top `fetch` nearest words and keeping those the caller's rows hold."""
    lex, W, seen = [], [], set()
    for d in data:
        for j, x in enumerate(d["V"]["lex"]):
            if x not in seen:
                seen.add(x)
                lex.append(x)
                W.append(d["V"]["W"][j])
    return {"lex": lex, "W": np.stack(W)}


def vocab_bm25_org(d: dict, qi: int, org: dict, *, m: int = 5, fetch: int = 20, tau: float = 0.3) -> np.ndarray:
    """vocab_bm25 (mode 'query') with the org table: its `fetch` nearest lexemes to the question
    (HNSW / exact kNN over the org's vocabulary), of those the m nearest that the caller's
    visible rows hold (df >= 1, counted in the BM25 statement) and are not the query's own."""
    q = d["qa"][qi]
    own = set(q["l"])
    sim = org["W"] @ q["e"]
    cand = [j for j in np.argsort(-sim)[:fetch] if sim[j] > tau]
    chosen = [(org["lex"][j], float(sim[j])) for j in cand if org["lex"][j] in d["vix"] and org["lex"][j] not in own][:m]
    if not chosen:
        return np.zeros(len(d["L"]))
    cols = np.array([d["vix"][x] for x, _ in chosen])
    return d["X"][:, cols].astype(np.float64) @ (np.array([s for _, s in chosen]) * d["idf"][cols])


def embedding_cost(data: list[dict], n_turns: int = 384, n_words: int = 768, repeats: int = 3) -> dict:
    """Seconds per item of the LocalEmbedder (one torch thread, batches of 64), measured side by
    side and interleaved: the plain turn text, the turn with its previous turn (lever 3's 'prev'),
    and vocabulary words (lever 2). Best of `repeats` (the machine is shared)."""
    rng = np.random.default_rng(0)
    turns = [(d, j) for d in data for j in range(len(d["texts"]))]
    pick = [turns[i] for i in rng.choice(len(turns), n_turns, replace=False)]
    plain = [d["texts"][j] for d, j in pick]
    prev = []
    for d, j in pick:
        p, _ = _adjacent(d)
        prev.append(f"{d['texts'][p[j]]} {d['texts'][j]}" if p[j] >= 0 else d["texts"][j])
    words = [w for d in data for w in d["V"]["word"]]
    words = [words[i] for i in rng.choice(len(words), n_words, replace=False)]
    emb = embedder()
    emb.embed(plain[:64])  # warm
    best = {"plain": np.inf, "prev": np.inf, "word": np.inf}
    for _ in range(repeats):
        for name, texts in (("plain", plain), ("prev", prev), ("word", words)):
            t0 = time.perf_counter()
            emb.embed(texts)
            best[name] = min(best[name], (time.perf_counter() - t0) / len(texts))
    # the vocabulary's growth: distinct lexemes after n turns, the five users' rows in sequence
    seen, growth = set(), {}
    order = [s for d in data for s in d["L"]]
    for i, s in enumerate(order, 1):
        seen |= s
        if i in (500, 1000, 2000, len(order)):
            growth[i] = len(seen)
    return {"ms_per_item": {k: 1000 * v for k, v in best.items()},
            "prev_over_plain": best["prev"] / best["plain"], "word_over_plain": best["word"] / best["plain"],
            "lexemes_after_n_turns": growth}


# -- query-time cost of the vocabulary lift in PostgreSQL (a scratch database, dropped after) --

_BM25_SQL = """
WITH vis AS MATERIALIZED (SELECT id, tsv FROM rows_{t}),
cand AS MATERIALIZED (SELECT lex, 1 - (emb <=> CAST(:qv AS vector)) AS sim FROM vocab
                      ORDER BY emb <=> CAST(:qv AS vector) LIMIT :fetch),
qterms AS (SELECT unnest(CAST(:lex AS text[])) AS lex, 1.0::float8 AS wt, 0 AS kind),
eterms AS (SELECT lex, sim AS wt, 1 AS kind FROM cand
           WHERE sim > :tau AND lex <> ALL (CAST(:lex AS text[]))),
terms AS MATERIALIZED (SELECT lex, to_tsquery('simple', quote_literal(lex)) AS q, wt, kind
                       FROM (SELECT * FROM qterms UNION ALL SELECT * FROM eterms) x),
pairs AS MATERIALIZED (SELECT terms.lex, vis.id FROM terms JOIN vis ON vis.tsv @@ terms.q),
df AS (SELECT terms.lex, terms.wt, terms.kind, count(pairs.id) AS df FROM terms
       LEFT JOIN pairs ON pairs.lex = terms.lex GROUP BY terms.lex, terms.wt, terms.kind),
big_n AS (SELECT count(*) AS n FROM vis),
-- the query's own lexemes, and the m most similar expansion lexemes the caller's rows hold
kept AS (SELECT * FROM df WHERE kind = 0 UNION ALL
         (SELECT * FROM df WHERE kind = 1 AND df >= 1 ORDER BY wt DESC, lex LIMIT :m)),
idf AS (SELECT lex, kind, wt * ln(1 + (n - df + 0.5) / (df + 0.5)) AS w FROM kept, big_n),
scored AS (SELECT p.id, sum(w) FILTER (WHERE kind = 0) AS r, sum(w) FILTER (WHERE kind = 1) AS r2
           FROM pairs p JOIN idf ON idf.lex = p.lex GROUP BY p.id)
SELECT * FROM (SELECT id, r, r2, row_number() OVER (ORDER BY r DESC NULLS LAST, id) AS rk,
                      row_number() OVER (ORDER BY r2 DESC NULLS LAST, id) AS rk2 FROM scored) s
WHERE (r IS NOT NULL AND rk <= 100) OR (r2 IS NOT NULL AND rk2 <= :depth)
"""


def sql_cost(data: list[dict], n_questions: int = 120, repeats: int = 2) -> dict:
    """p50/p95 ms of one user's BM25 statement (the service's per-lexeme path, raw SQL) with the
    query's lexemes only (fetch 0) and with the vocabulary lift folded into it (the org
    vocabulary's 20 nearest lexemes by exact kNN, the 5 nearest that the user's rows hold, their
    top 30 rows), alternated per question. The vocabulary table holds every user's lexemes (the
    org's), the rows table one user's turns (conv-41, 663 rows)."""
    from sqlalchemy import create_engine, text

    org = org_vocabulary(data)
    admin = create_engine(engine().url, isolation_level="AUTOCOMMIT")
    name = "memscale_levers_scratch"
    with admin.connect() as c:
        c.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        c.execute(text(f"CREATE DATABASE {name}"))
    eng = create_engine(engine().url.set(database=name))
    try:
        d = next(x for x in data if x["sid"] == "conv-41")
        with eng.begin() as c:
            c.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
            c.execute(text("CREATE TABLE rows_u (id int PRIMARY KEY, tsv tsvector)"))
            c.execute(text("INSERT INTO rows_u SELECT ord, to_tsvector('english', t) "
                           "FROM unnest(CAST(:ts AS text[])) WITH ORDINALITY AS x(t, ord)"), {"ts": d["texts"]})
            c.execute(text("CREATE TABLE vocab (lex text PRIMARY KEY, emb vector(384))"))
            c.execute(text("INSERT INTO vocab SELECT l, CAST(e AS vector) FROM unnest(CAST(:l AS text[]), "
                           "CAST(:e AS text[])) AS x(l, e)"),
                      {"l": org["lex"], "e": ["[" + ",".join(f"{v:.6f}" for v in w) + "]" for w in org["W"]]})
            c.execute(text("ANALYZE"))
        sql = text(_BM25_SQL.format(t="u"))
        knn = text("SELECT lex, 1 - (emb <=> CAST(:qv AS vector)) FROM vocab ORDER BY emb <=> CAST(:qv AS vector) LIMIT 20")
        runs = (("query terms only", 0), ("with vocabulary lift", 20), ("with lift, fetch 5", 5), ("vocabulary kNN alone", -1))
        times: dict[str, list[float]] = {k: [] for k, _ in runs}
        qs = d["qa"][:n_questions]
        with eng.connect() as c:
            for _ in range(repeats):
                for q in qs:
                    qv = "[" + ",".join(f"{v:.6f}" for v in q["e"]) + "]"
                    for label, fetch in runs:
                        t0 = time.perf_counter()
                        if fetch < 0:
                            c.execute(knn, {"qv": qv}).all()
                        else:
                            c.execute(sql, {"qv": qv, "lex": list(dict.fromkeys(q["l"])), "fetch": fetch,
                                            "tau": 0.3, "m": 5, "depth": 30}).all()
                        times[label].append(1000 * (time.perf_counter() - t0))
        return {k: {"p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95))} for k, v in times.items()}
    finally:
        eng.dispose()
        with admin.connect() as c:
            c.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        admin.dispose()


# -- the report ---------------------------------------------------------------------------------

VOCAB = {"m": 5, "tau": 0.3}  # the recommended vocabulary lift: 5 nearest words, similarity > 0.3
RECOMMENDED = {"vocab": VOCAB, "w_vocab": 0.5, "len_beta": 0.3}


def _show(name: str, res: dict, out: dict, sids: list[str]) -> None:
    print(fmt(name, res) + "  per conv @10 " + " ".join(f"{res[s][10]:.3f}" for s in sids), flush=True)
    out[name] = {g: {k: round(v, 4) for k, v in res[g].items()} for g in res if g != "_rows"}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.research.levers", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default="/tmp/levers")
    ap.add_argument("--only", default="base,len,vocab,together,org,ctxemb,combiner",
                    help="comma-separated: base,len,vocab,together,org,ctxemb,combiner,context,cost")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    cache = Path(args.cache)
    os.environ["LEVERS_CACHE"] = str(cache)
    data = build(cache)
    attach_vocab(data, cache)
    sids = [d["sid"] for d in data]
    out: dict = {}
    print(HEADER)

    def loo_show(name: str, pp: dict) -> None:
        h, a, best, chosen = loo_grid(pp)
        _show(f"{name}: held out (LOO)", h, out, sids)
        _show(f"{name}: fit on all {best}", a, out, sids)
        print(f"    folds chose {chosen}", flush=True)
        out[f"{name}: folds"] = {k: str(v) for k, v in chosen.items()}

    if "base" in only:
        _show("base (service ranking)", summarise(per_question(data, lambda d, qi: combined(d, qi))), out, sids)
        _show("base + second round", summarise(per_question(data, lambda d, qi: combined(d, qi, second=True))), out, sids)
    if "len" in only:  # lever 4a: a length prior
        pp = {(w, b): per_question(data, lambda d, qi, w=w, b=b: ranked(d, qi, len_beta=b, len_where=w))
              for w in ("fused", "final") for b in (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8)}
        loo_show("length prior (where, beta)", pp)
    if "vocab" in only:  # lever 2 alone
        pp = {("off",): per_question(data, lambda d, qi: ranked(d, qi))}
        for m, tau in itertools.product((5, 10, 20), (0.0, 0.3)):
            ex = {(d["sid"], qi): vocab_bm25(d, qi, m=m, tau=tau)[0] for d in data for qi in range(len(d["qa"]))}
            for lam in (0.3, 0.5, 0.7):
                pp[(m, tau, lam)] = per_question(
                    data, lambda d, qi, ex=ex, lam=lam: ranked(d, qi, lift=ex[(d["sid"], qi)], w_lift=lam, lift_pool=30))
        loo_show("vocabulary lift (m, tau, w)", pp)
    if "together" in only:  # levers 2 + 4a, without and with the second round
        for sec in (False, True):
            pp = {}
            for lb, wv, m in itertools.product((0.0, 0.3, 0.5), (0.0, 0.3, 0.5, 0.7), (5, 10)):
                if wv == 0 and m == 10:
                    continue
                pp[(lb, wv, m)] = per_question(data, lambda d, qi, lb=lb, wv=wv, m=m: combined(
                    d, qi, vocab={"m": m, "tau": 0.3} if wv else None, w_vocab=wv, len_beta=lb, second=sec))
            loo_show(f"vocab + length (len, w, m){' + second round' if sec else ''}", pp)
            _show(f"  recommended {'+ second round' if sec else ''}", summarise(pp[(0.3, 0.5, 5)]), out, sids)
    if "org" in only:  # lever 2 with one org-wide vocabulary table (what the service would store)
        org = org_vocabulary(data)
        print(f"    org vocabulary: {len(org['lex'])} lexemes for {sum(len(d['L']) for d in data)} turns "
              f"(the users' own: {sum(len(d['V']['lex']) for d in data)} in all)")
        for fetch in (5, 20, 50):
            ex = {(d["sid"], qi): vocab_bm25_org(d, qi, org, m=5, fetch=fetch) for d in data for qi in range(len(d["qa"]))}
            _show(f"recommended, org vocabulary, fetch {fetch}", summarise(per_question(data, lambda d, qi, ex=ex: ranked(
                d, qi, lift=ex[(d["sid"], qi)], w_lift=0.5, lift_pool=30, len_beta=0.3, len_where="final"))), out, sids)
    if "ctxemb" in only:  # lever 3
        embed_all(data, cache, variants=("prev", "date", "pdate"))
        for v in ("prev", "date", "pdate"):
            _show(f"embedding '{v}' replaces the turn's", summarise(per_question(
                data, lambda d, qi, v=v: ranked(d, qi, cos=d[f"E_{v}"] @ d["qa"][qi]["e"]))), out, sids)
    if "combiner" in only:  # lever 1
        rows = feature_table(data, extra_fn=lambda d, qi: {"voc": vocab_bm25(d, qi, **VOCAB)[0]})
        sets = {"4 (service's)": tuple(BASE_W),
                "5 (+len)": (*BASE_W, "len"),
                "19 (all row features)": FEATURES,
                "6 (+vocab, len)": (*BASE_W, "voc_pos", "len"),
                "15 (+vocab, len, coverage, ranks)": (*BASE_W, "voc", "voc_pos", "voc_sup", "voc_sess", "len",
                                                      "sess2", "cover", "rare", "nmatch", "rank_c", "rank_b")}
        init = {**BASE_W, "voc_pos": 0.5, "len": 0.3}
        for label, names in sets.items():
            for l2 in (0.03, 0.3):
                h, a, ws = loo(rows, names, lambda tr, names=names, l2=l2: fit_listwise(tr, names, l2=l2, init=init))
                _show(f"listwise {label} l2={l2}: LOO", h, out, sids)
                _show("    fit on all", a, out, sids)
                print("    weights (all):", {x: round(float(w), 2) for x, w in zip(names, ws["all"])})
    if "context" in only:  # in context at 1,000 / 1,800 tokens (app.context.assemble.fit)
        for name, kw in (("base", {}), ("base + second round", {"second": True}),
                         ("recommended", RECOMMENDED), ("recommended + second round", {**RECOMMENDED, "second": True})):
            r = in_context(data, lambda d, qi, kw=kw: combined(d, qi, **kw))
            out[f"in context: {name}"] = r
            print(f"in context {name:<28} 1,000: {r[1000]:.4f}  1,800: {r[1800]:.4f}  per category 1,000 "
                  + " ".join(f"{c} {v:.3f}" for c, v in r["cats"][1000].items()), flush=True)
    if "cost" in only:
        out["embedding cost"] = embedding_cost(data)
        print("embedding cost:", out["embedding cost"], flush=True)
        out["sql cost"] = sql_cost(data)
        print("sql cost (ms):", out["sql cost"], flush=True)
    import json

    path = cache / "report.json"  # merged with an earlier run's (--only runs add their parts)
    earlier = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**earlier, **out}, indent=1, default=str))
    print(f"written {cache / 'report.json'}")
    return out


if __name__ == "__main__":
    main()
