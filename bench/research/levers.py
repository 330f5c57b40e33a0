"""Offline search for ranking levers on LoCoMo dev (evidence recall), leave-one-conversation-out.

    nice -n 10 .venv/bin/python -m bench.research.levers [--cache /tmp/levers]
        [--only base,len,vocab,together,org,ctxemb,combiner,context,cost]

Reuses bench.quality.locomo.fit (the numpy copy of app.search's hybrid ranking: pool of vector
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
import os
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.research.levers_combiner import BASE_W, FEATURES, feature_table, fit_listwise, loo
from bench.research.levers_data import HEADER, build, embed_all, engine, fmt, loo_grid, summarise
from bench.research.levers_vocab import (
    attach_vocab,
    combined,
    embedding_cost,
    in_context,
    org_vocabulary,
    per_question,
    ranked,
    vocab_bm25,
    vocab_bm25_org,
)

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
            c.execute(
                text(
                    "INSERT INTO rows_u SELECT ord, to_tsvector('english', t) "
                    "FROM unnest(CAST(:ts AS text[])) WITH ORDINALITY AS x(t, ord)"
                ),
                {"ts": d["texts"]},
            )
            c.execute(text("CREATE TABLE vocab (lex text PRIMARY KEY, emb vector(384))"))
            c.execute(
                text(
                    "INSERT INTO vocab SELECT l, CAST(e AS vector) FROM unnest(CAST(:l AS text[]), CAST(:e AS text[])) AS x(l, e)"
                ),
                {"l": org["lex"], "e": ["[" + ",".join(f"{v:.6f}" for v in w) + "]" for w in org["W"]]},
            )
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
                            c.execute(
                                sql,
                                {"qv": qv, "lex": list(dict.fromkeys(q["l"])), "fetch": fetch, "tau": 0.3, "m": 5, "depth": 30},
                            ).all()
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
    ap = argparse.ArgumentParser(
        prog="python -m bench.research.levers", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--cache", default="/tmp/levers")
    ap.add_argument(
        "--only",
        default="base,len,vocab,together,org,ctxemb,combiner",
        help="comma-separated: base,len,vocab,together,org,ctxemb,combiner,context,cost",
    )
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
        pp = {
            (w, b): per_question(data, lambda d, qi, w=w, b=b: ranked(d, qi, len_beta=b, len_where=w))
            for w in ("fused", "final")
            for b in (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8)
        }
        loo_show("length prior (where, beta)", pp)
    if "vocab" in only:  # lever 2 alone
        pp = {("off",): per_question(data, lambda d, qi: ranked(d, qi))}
        for m, tau in itertools.product((5, 10, 20), (0.0, 0.3)):
            ex = {(d["sid"], qi): vocab_bm25(d, qi, m=m, tau=tau)[0] for d in data for qi in range(len(d["qa"]))}
            for lam in (0.3, 0.5, 0.7):
                pp[(m, tau, lam)] = per_question(
                    data, lambda d, qi, ex=ex, lam=lam: ranked(d, qi, lift=ex[(d["sid"], qi)], w_lift=lam, lift_pool=30)
                )
        loo_show("vocabulary lift (m, tau, w)", pp)
    if "together" in only:  # levers 2 + 4a, without and with the second round
        for sec in (False, True):
            pp = {}
            for lb, wv, m in itertools.product((0.0, 0.3, 0.5), (0.0, 0.3, 0.5, 0.7), (5, 10)):
                if wv == 0 and m == 10:
                    continue
                pp[(lb, wv, m)] = per_question(
                    data,
                    lambda d, qi, lb=lb, wv=wv, m=m, sec=sec: combined(
                        d, qi, vocab={"m": m, "tau": 0.3} if wv else None, w_vocab=wv, len_beta=lb, second=sec
                    ),
                )
            loo_show(f"vocab + length (len, w, m){' + second round' if sec else ''}", pp)
            _show(f"  recommended {'+ second round' if sec else ''}", summarise(pp[(0.3, 0.5, 5)]), out, sids)
    if "org" in only:  # lever 2 with one org-wide vocabulary table (what the service would store)
        org = org_vocabulary(data)
        print(
            f"    org vocabulary: {len(org['lex'])} lexemes for {sum(len(d['L']) for d in data)} turns "
            f"(the users' own: {sum(len(d['V']['lex']) for d in data)} in all)"
        )
        for fetch in (5, 20, 50):
            ex = {(d["sid"], qi): vocab_bm25_org(d, qi, org, m=5, fetch=fetch) for d in data for qi in range(len(d["qa"]))}
            _show(
                f"recommended, org vocabulary, fetch {fetch}",
                summarise(
                    per_question(
                        data,
                        lambda d, qi, ex=ex: ranked(
                            d, qi, lift=ex[(d["sid"], qi)], w_lift=0.5, lift_pool=30, len_beta=0.3, len_where="final"
                        ),
                    )
                ),
                out,
                sids,
            )
    if "ctxemb" in only:  # lever 3
        embed_all(data, cache, variants=("prev", "date", "pdate"))
        for v in ("prev", "date", "pdate"):
            _show(
                f"embedding '{v}' replaces the turn's",
                summarise(per_question(data, lambda d, qi, v=v: ranked(d, qi, cos=d[f"E_{v}"] @ d["qa"][qi]["e"]))),
                out,
                sids,
            )
    if "combiner" in only:  # lever 1
        rows = feature_table(data, extra_fn=lambda d, qi: {"voc": vocab_bm25(d, qi, **VOCAB)[0]})
        sets = {
            "4 (service's)": tuple(BASE_W),
            "5 (+len)": (*BASE_W, "len"),
            "19 (all row features)": FEATURES,
            "6 (+vocab, len)": (*BASE_W, "voc_pos", "len"),
            "15 (+vocab, len, coverage, ranks)": (
                *BASE_W,
                "voc",
                "voc_pos",
                "voc_sup",
                "voc_sess",
                "len",
                "sess2",
                "cover",
                "rare",
                "nmatch",
                "rank_c",
                "rank_b",
            ),
        }
        init = {**BASE_W, "voc_pos": 0.5, "len": 0.3}
        for label, names in sets.items():
            for l2 in (0.03, 0.3):
                h, a, ws = loo(rows, names, lambda tr, names=names, l2=l2: fit_listwise(tr, names, l2=l2, init=init))
                _show(f"listwise {label} l2={l2}: LOO", h, out, sids)
                _show("    fit on all", a, out, sids)
                print("    weights (all):", {x: round(float(w), 2) for x, w in zip(names, ws["all"])})
    if "context" in only:  # in context at 1,000 / 1,800 tokens (app.context.assemble.fit)
        for name, kw in (
            ("base", {}),
            ("base + second round", {"second": True}),
            ("recommended", RECOMMENDED),
            ("recommended + second round", {**RECOMMENDED, "second": True}),
        ):
            r = in_context(data, lambda d, qi, kw=kw: combined(d, qi, **kw))
            out[f"in context: {name}"] = r
            print(
                f"in context {name:<28} 1,000: {r[1000]:.4f}  1,800: {r[1800]:.4f}  per category 1,000 "
                + " ".join(f"{c} {v:.3f}" for c, v in r["cats"][1000].items()),
                flush=True,
            )
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
