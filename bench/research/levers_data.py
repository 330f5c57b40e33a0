"""The levers search's data and scoring core: LoCoMo dev loaded per conversation with its
embeddings and lexemes (cached), a vectorised copy of fit.score, recall by LoCoMo's evidence rule,
and the leave-one-conversation-out grid."""

from __future__ import annotations

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

from bench.quality.locomo import fit

CATS = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*[A-Za-z]|[A-Za-z]|\d+")

_EMB = None
_ENG = None


def embedder():
    global _EMB
    if _EMB is None:
        import torch

        torch.set_num_threads(1)
        from app.kit.runtime.embedding import LocalEmbedder

        _EMB = LocalEmbedder()
    return _EMB


def engine():
    global _ENG
    if _ENG is None:
        from sqlalchemy import create_engine

        from app.config import Settings
        from app.kit.database.pg import admin_url

        _ENG = create_engine(admin_url(Settings()))
    return _ENG


def lexemes(texts: list[str]) -> list[list[str]]:
    """Postgres's own to_tsvector('english', ...) lexemes, in tsvector order."""
    from sqlalchemy import text

    out: list[list[str]] = [[] for _ in texts]
    with engine().connect() as c:
        for start in range(0, len(texts), 5000):
            chunk = texts[start : start + 5000]
            rows = c.execute(
                text(
                    "SELECT ord, tsvector_to_array(to_tsvector('english', t)) "
                    "FROM unnest(CAST(:ts AS text[])) WITH ORDINALITY AS x(t, ord)"
                ),
                {"ts": chunk},
            ).all()
            for o, lex in rows:
                out[start + o - 1] = list(lex)
    return out


def cached(path: Path, make):
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
        idf = np.log(1 + (n - df + 0.5) / (df + 0.5)).astype(np.float32)
        d = {
            "sid": sid,
            "dia": [t.dia_id for t in c.turns],
            "sess": np.array([t.session for t in c.turns]),
            "E": E,
            "L": L,
            "df": Counter(x for s in L for x in s),
            "texts": texts,
            "turns": c.turns,
            "vocab": vocab,
            "vix": vix,
            "X": X,
            "idf": idf,
            "qa": [{"e": QE[i], "l": ql[i], "ev": q.evidence, "cat": q.category, "q": q.question} for i, q in enumerate(c.qa)],
        }
        d["evix"] = [np.array([d["dia"].index(e) for e in q["ev"]]) for q in d["qa"]]
        data.append(d)
    return data


# -- a vectorised copy of fit.score -----------------------------------------------------------


def bm25_vec(d: dict, terms, weights=None) -> np.ndarray:
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


def evaluate(data: list[dict], scorer, ks=(5, 10, 25)) -> dict:
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


def base_scorer(**kw):
    return lambda d, qi: fit.score(d, d["qa"][qi], **{**fit.DEFAULT, **kw})


def adjacent(d: dict) -> tuple[np.ndarray, np.ndarray]:
    if "prev" not in d:
        n, sess = len(d["L"]), d["sess"]
        prev, nxt = np.arange(n) - 1, np.arange(n) + 1
        prev[0], nxt[-1] = -1, -1
        prev[1:][sess[1:] != sess[:-1]] = -1
        nxt[:-1][sess[1:] != sess[:-1]] = -1
        d["prev"], d["next"] = prev, nxt
    return d["prev"], d["next"]


# -- embeddings for levers 2 and 3 (cached) ------------------------------------------------------


def ctx_texts(d: dict, variant: str) -> list[str]:
    """Contextual texts for one embedding per turn that replaces the turn's own:
    prev   the previous turn of the session, then this turn (known when the turn is ingested)
    date   the session date, then this turn
    pdate  the session date, the previous turn, this turn"""
    prev, _ = adjacent(d)
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

    def mean_on(p, keep) -> float:
        return float(np.mean([r[2][k_select] for r in per_point[p] if keep(r[0])]))

    pts = list(per_point)

    def best_without(sid: str) -> object:
        """The point with the best mean on every conversation but `sid` (the first of equals)."""
        return max(pts, key=lambda p: (mean_on(p, lambda s: s != sid), -pts.index(p)))

    held, chosen = [], {}
    for sid in sids:
        p = best_without(sid)
        chosen[sid] = p
        held += [r for r in per_point[p] if r[0] == sid]
    best = max(pts, key=lambda p: (mean_on(p, lambda s: True), -pts.index(p)))
    return summarise(held, ks), summarise(per_point[best], ks), best, chosen
