"""Levers 2 and 3: semantic expansion of BM25 from an embedded vocabulary (per user and org-wide),
a length prior, their combination with the service's ranking, evidence in an assembled context,
and the embedding cost of the vocabulary."""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from pathlib import Path

import numpy as np

from bench.quality.locomo import fit
from bench.research.levers_data import (
    CATS,
    WORD,
    adjacent,
    bm25_vec,
    cached,
    embedder,
    make_pool,
    query_words,
    recall_at,
    vocabulary,
    word_lexemes,
    zpool,
)

# -- a general scorer: the service's ranking with the levers' extra terms ----------------------


def length_prior(d: dict) -> np.ndarray:
    """log(1 + lexemes in the row) - its mean over the user's rows (tsvector's length())."""
    if "lenp" not in d:
        ln = d["X"].sum(1)
        d["lenp"] = np.log1p(ln) - np.log1p(ln).mean()
    return d["lenp"]


def ranked(
    d: dict,
    qi: int,
    *,
    cos: np.ndarray | None = None,
    bm: np.ndarray | None = None,
    lift: np.ndarray | None = None,
    w_lift: float = 0.0,
    lift_pool: int = 0,
    len_beta: float = 0.0,
    len_where: str = "fused",
    w_vector: float = 1.0,
    neighbour: float = 0.5,
    session: float = 0.5,
    pool_size: int = fit.POOL,
) -> np.ndarray:
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


def per_question(data: list[dict], scorer, ks=(5, 10, 25)) -> list:
    return [(d["sid"], q["cat"], recall_at(d["evix"][qi], scorer(d, qi), ks)) for d in data for qi, q in enumerate(d["qa"])]


# -- lever 2: semantic term expansion of BM25 from an embedded vocabulary ----------------------


def attach_vocab(data: list[dict], cache: Path) -> None:
    for d in data:
        if "V" in d:
            continue
        v = vocabulary(d, cache)
        d["V"] = {"lex": v["lex"], "word": v["word"], "W": v["W"], "col": np.array([d["vix"][x] for x in v["lex"]])}
        d["QW"] = query_words(d, cache)


def vocab_bm25(
    d: dict,
    qi: int,
    *,
    m: int = 10,
    mode: str = "query",
    tau: float = 0.0,
    gamma: float = 1.0,
    per_term: int = 3,
    max_df: float = 1.0,
    min_df: int = 1,
    max_cap: float = 1.0,
    agg: str = "idf",
) -> tuple[np.ndarray, list]:
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
        for _lex, e in d["QW"][qi].items():
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


def combined(
    d: dict,
    qi: int,
    *,
    vocab: dict | None = None,
    w_vocab: float = 0.5,
    vocab_pool: int = 30,
    len_beta: float = 0.0,
    second: bool = False,
    expand_from: int = 5,
    expand_terms: int = 10,
    expand_weight: float = 0.3,
    expand_depth: int = 30,
    neighbour: float = 0.5,
    session: float = 0.5,
) -> np.ndarray:
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
    words = {
        x
        for j in np.argsort(-s, kind="stable")[:expand_from]
        for x in d["L"][j]
        if x not in set(q["l"]) and d["df"].get(x, 0) >= 2
    }
    terms = sorted(words, key=lambda x: (-d["idf"][d["vix"][x]], x))[:expand_terms]
    bm2 = bm25_vec(d, set(terms))
    added = np.array(sorted({j for j in np.argsort(-bm2)[:expand_depth] if bm2[j] > 0} - set(pool)), dtype=int)
    pool = np.array(sorted(set(pool) | set(added)))
    f = fused(pool) + expand_weight * np.maximum(zpool(bm2, pool), 0.0)
    return fit._context(d, f, pool, neighbour, session, added) + lp


def in_context(data: list[dict], scorer, budgets: tuple[int, ...] = (1000, 1800)) -> dict:
    """fit.in_context for any scorer(d, qi): the service's `fit` over the top budget // 30 turns
    at their logistic score and their neighbours at half of it. {budget: mean, 'cats': {...}}."""
    from app.config import Settings
    from app.context.assemble import Piece
    from app.context.assemble import fit as fit_pieces
    from app.llm.gateway import Gateway

    settings = Settings()
    count = Gateway(settings.llm_model, data_dir=settings.data_dir).count_tokens
    got = {b: [] for b in budgets}
    cats = []
    for d in data:
        ts = d["turns"]

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
        p, _ = adjacent(d)
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
    return {
        "ms_per_item": {k: 1000 * v for k, v in best.items()},
        "prev_over_plain": best["prev"] / best["plain"],
        "word_over_plain": best["word"] / best["plain"],
        "lexemes_after_n_turns": growth,
    }
