"""Multi-hop retrieval on LoCoMo dev, offline: what the ranking misses, and levers for it.

    nice -n 10 .venv/bin/python -m bench.research.multihop --data PATH [--cache DIR] [--only pattern,levers]

The ranking is bench/quality/locomo/fit.py's offline copy of the service's (app.search.signals over
the vector top-100 + text top-100 pool; each conversation one user's rows), with the length prior
on as in the service; the vocabulary lift and the time window stay off (they need the service).
Embeddings and lexemes are bench/research/levers_data.py's, cached under `--cache`.

pattern   for each multi-hop evidence turn missed by the top 10: is its session among the top 10's
          sessions, is it spoken by a speaker the question names, does it share a word (lexeme) or
          a name (a capitalised word) with the question, with a found evidence turn, the top 10;
          where it ranks
levers    each scored leave-one-conversation-out (the grid point best on four conversations scored
          on the fifth) and fit on all five, recall@10 overall and per category:
  speaker     signals.spoken_by_named: the turns of a speaker the question names, a lift of weight w
              (the service's `speaker` signal)
  diversity   a turn loses w x ln(1 + its rank among the pool's turns of its
              session by the score so far), so that the top 10 holds more sessions
  names       a second query from the names (capitalised words not in the question) of the first
              round's best turns: its BM25 a lift with weight w, its top 30 join the pool
  rare        the service's second round (rarest words of the best turns) switched on for search
  speaker_demoted  the same signal's other form: the turns of speakers the question does not
              name lose w (the research swaps it into the signal table for its own process)
  speaker_*   diversity, names and rare on top of the speaker lift at 8
  pool levers on top of the speaker lift at 8: rows that join the 200-row pool (the service's pool
              misses 63 multi-hop evidence turns); each reports how many of them joined (`joined`)
    speaker_join      the named speaker's own spk_vec nearest and spk_text best-BM25 turns
    speaker_sessions  the sess_fill nearest turns of each session with none in the pool
    speaker_beside    the turns within adj_reach of the adj_from best fused turns (a second fusion);
                      _named: of the named speaker only; speaker_after: the following turns only;
                      _cost: the joined turns lose adj_cost after the second fusion;
                      _keep: the pooled rows keep their first fusion's scores
latency   (`--latency N`, through the service over HTTP) /v1/search (episodes, k 10) and /v1/context
          (1,000 tokens) p50 / p95 with a lever off and on (`--latency-off` / `--latency-on`, Tuning
          changes as JSON; the speaker lift off / the defaults unless given), alternated request by
          request over N sampled questions so both see the same load

Figures (LoCoMo dev, MiniLM, 760 questions; recall@10 all / multi-hop / temporal / open-domain /
single-hop; the base is this offline ranking, 0.753 / 0.442 / 0.845 / 0.443 / 0.857):
  pattern: 142 multi-hop questions, 415 evidence turns, 244 missed by the top 10 (115 questions);
    160 of the 244 (66 %) in a session none of the top 10 comes from (the top 10 holds 4.5
    sessions, a question's evidence 2.6; 96 % of the questions need two sessions or more);
    234 of 244 (96 %) spoken by a speaker the question names (400 of all 415 evidence turns);
    only 4 share no word with the question (its speaker's name is the shared word), 209 share no
    name with it; 63 are outside the 200-row pool, 112 rank 10-49.
  speaker      held out 0.776 / 0.491 / 0.857 / 0.466 / 0.874 (w 12 chosen in every fold; w 8 on
               all: 0.774 / 0.473 / 0.864 / 0.466 / 0.874): kept, every category up
  speaker_demoted  held out 0.760 / 0.477 / 0.859 / 0.455 / 0.852 (w 2-3): single-hop down, lost
               (the lift's gain passes on through the neighbour and session signals)
  diversity    held out 0.749 / 0.430 / 0.845 / 0.421 / 0.857: lost (the session signal's best
               session is usually the right one; pushing its turns down costs more than it finds)
  names        held out 0.761 / 0.432 / 0.866 / 0.436 / 0.868: overall up, multi-hop down: lost
  rare         held out 0.757 / 0.438 / 0.851 / 0.441 / 0.864: multi-hop down: lost
  with the speaker lift at 8 (0.774 / 0.473 / 0.864 / 0.466 / 0.874): diversity held out
               0.776 / 0.490 / 0.864 / 0.455 / 0.874 (+0.0025, open-domain -0.011), names 0.772,
               rare 0.773: none clears +0.005 with no category down.
  pool levers (the 63 outside the pool: 61 in a session the pool holds, 32 beside a pooled turn,
  42 within two; by cosine they rank 204th of the turns at the median, 161st of their speaker's):
  speaker_join      held out 0.774 / 0.477 / 0.864 / 0.466 / 0.874 (+0.0006); 2 of 63 join at the
                    fit point (20 by text), 23 with 100 + 100: lost
  speaker_sessions  held out 0.774 (+0.0000), 0-1 of 63 join: lost (their sessions are pooled)
  speaker_beside    held out 0.783 / 0.482 / 0.870 / 0.438 / 0.890 (+0.0098; 26 of 63 join at 50
                    seeds, reach 2): open-domain -0.028, lost; _named 0.776 (+0.0019; fit on all
                    +0.0065, folds flip between 5 and 50 seeds); speaker_after 0.777, multi-hop down
                    _cost (joined turns -0-4): 0.783, open-domain 0.438 at every cost, and at cost
                    1000 (no joined turn in the top 10): the second fusion's statistics cost it
                    _keep (pooled rows keep the first fusion's scores): held out 0.786 / 0.487 /
                    0.883 / 0.477 / 0.884 (+0.0125, every category up; 20 seeds, reach 1 in every
                    fold; 13 of 63 join): holds offline; 50 seeds 0.770, 200 0.623 (the joined
                    rows' scores come from the larger pool's z-statistics); built in the service
                    (commit 78ac1b9, `Tuning.beside_from`) it did not hold there (multi-hop
                    and open-domain down, docs/search.md): not kept in the service
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.research import levers_data as L
from bench.research.multihop_pool import beside, diversity_penalty, joins

NAME = re.compile(r"\b[A-Z][a-z]{2,}\b")
BASE = {"w_vector": 1.0, "neighbour": 0.5, "session": 0.5, "length_prior": 0.3}


def load(data_path: str | None, cache: Path) -> list[dict]:
    import bench.quality.locomo.data as D

    if data_path:
        D.load = functools.partial(D.load, data_path)
    data = L.build(cache)
    for d in data:
        d["names"] = [set(NAME.findall(t.text.split(":", 1)[1] if ":" in t.text else t.text)) for t in d["turns"]]
        d["speaker"] = [t.speaker for t in d["turns"]]
        d["nlex"] = [len(s) for s in d["L"]]
        df = Counter(w for s in d["names"] for w in s)
        n = len(d["names"])
        d["name_idf"] = {w: math.log(1 + (n - c + 0.5) / (c + 0.5)) for w, c in df.items()}
    return data


class _Row:
    __slots__ = ("id", "d", "session_id", "n_lex")

    def __init__(self, j: int, cos: float, sess, n_lex: int) -> None:
        self.id, self.d, self.session_id, self.n_lex = int(j), 1.0 - float(cos), int(sess), n_lex


def rank(
    d: dict,
    q: dict,
    *,
    diversity=0.0,
    session=0.5,
    speaker=0.0,
    demote=False,
    names=0.0,
    names_from=5,
    rare=0.0,
    rare_terms=10,
    depth=30,
    spk_vec=0,
    spk_text=0,
    sess_fill=0,
    sess_named=False,
    adj_from=0,
    adj_reach=1,
    adj_named=False,
    adj_after=False,
    extra=(),
    adj_cost=0.0,
    adj_keep=False,
) -> np.ndarray:
    """The service's fusion over this question's pool (app.search.signals.fuse), with the levers;
    -inf outside the pool."""
    from app.search.signals import SIGNALS, Pool, Signal, fuse, lift, spoken_by_named

    SIGNALS["speaker"] = Signal(_demoted if demote else lift("speaker"), "speaker_weight")
    from app.search.tuning import DEFAULT_TUNING

    tun = replace(
        DEFAULT_TUNING, vocab_terms=0, vocab_weight=0.0, time_weight=0.0, speaker_weight=speaker, **{**BASE, "session": session}
    )
    cos = d["E"] @ q["e"]
    bm = L.bm25_vec(d, list(set(q["l"][:32])))
    pool = sorted(set(L.make_pool(cos, bm).tolist()) | set(extra))
    if spk_vec or spk_text or sess_fill:
        pool = sorted(
            set(pool)
            | set(joins(d, q, cos, bm, pool, spk_vec=spk_vec, spk_text=spk_text, sess_fill=sess_fill, sess_named=sess_named))
        )
    pairs = [(j + o, j) for j in pool for o in (-1, 1) if 0 <= j + o < len(cos) and d["sess"][j + o] == d["sess"][j]]
    rows = [_Row(j, cos[j], d["sess"][j], d["nlex"][j]) for j in pool]
    lift0 = {}
    if speaker:  # the turns of a speaker the question names (the service's speaker lift)
        lift0 = {"speaker": spoken_by_named(q["q"], {j: d["speaker"][j] for j in pool})}
    base = Pool(rows=rows, bm25={j: float(bm[j]) for j in pool if bm[j] > 0}, pairs=pairs, turns=True, lifts=lift0)
    total, _ = fuse(base, tun)
    seeds = sorted(total, key=lambda j: (-total[j], j))
    if adj_from:  # the turns beside the best pooled turns join, and the pool is fused again
        near = beside(d, seeds[:adj_from], adj_reach, after=adj_after)
        if adj_named:  # of a speaker the question names only
            near = [j for j in near if j in spoken_by_named(q["q"], {j: d["speaker"][j] for j in near})]
        s = rank(d, q, session=session, speaker=speaker, extra=tuple(set(pool) | set(near)))
        joined = [j for j in set(near) - set(pool)]
        s[joined] -= adj_cost  # a joined neighbour below its seeds
        if adj_keep:  # the pooled rows keep their first fusion's scores
            s[pool] = [total[j] for j in pool]
        return s
    found = []
    if names:  # the names of the best turns, not in the question, as a second query (binary tf, IDF over the user's turns)
        qwords = {w.lower() for w in re.findall(r"[A-Za-z]+", q["q"])}
        ws = {w for j in seeds[:names_from] for w in d["names"][j] if w.lower() not in qwords}
        s2 = np.array([sum(d["name_idf"][w] for w in nm & ws) for nm in d["names"]])
        found = [int(j) for j in np.argsort(-s2, kind="stable")[:depth] if s2[j] > 0]
        weight = names
    elif rare:  # the service's second round
        words = {x for j in seeds[:5] for x in d["L"][j] if x not in set(q["l"]) and d["df"].get(x, 0) >= 2}
        terms = sorted(words, key=lambda x: (-d["idf"][d["vix"][x]], x))[:rare_terms]
        s2 = L.bm25_vec(d, terms)
        found = [int(j) for j in np.argsort(-s2, kind="stable")[:depth] if s2[j] > 0]
        weight = rare
    if found:
        have = set(total)
        rows = rows + [_Row(j, cos[j], d["sess"][j], d["nlex"][j]) for j in found if j not in have]
        lifts = {**lift0, "second_round": {j: float(s2[j]) for j in found}}
        total, _ = fuse(replace(base, rows=rows, lifts=lifts), replace(tun, expand_weight=weight))
    if diversity:  # last, after every signal of the service's table
        penalty = diversity_penalty(rows, total, diversity)
        total = {j: v + penalty.get(j, 0.0) for j, v in total.items()}
    s = np.full(len(cos), -np.inf)
    for j, v in total.items():
        s[j] = v
    return s


def _demoted(pool, total: dict, w: float) -> dict:
    """The speaker lift's other form: the pooled turns of speakers the query does not name lose w
    (the named speaker's keep their score, so the fused scores stay on the scale they had)."""
    named = pool.lifts.get("speaker")
    return {i: -w for i in total if i not in named} if named else {}


def pattern(data: list[dict]) -> dict:
    """Counts over the multi-hop evidence the base ranking's top 10 misses."""
    from app.search.signals import spoken_by_named

    c = dict.fromkeys(
        "questions missed_q evidence missed other_session same_speaker_as_found no_word_q no_name_q word_with_found "
        "name_with_found name_with_top10 any_found_in_q evidence_by_named_speaker missed_by_named_speaker "
        "outside_pool outside_in_pooled_session outside_beside_pooled outside_within2_pooled".split(),
        0,
    )
    sess_top, ev_sess, ranks = [], [], []
    for d in data:
        for qi, q in enumerate(d["qa"]):
            if q["cat"] != 1:
                continue
            s = rank(d, q)
            top = L.topk(s, 10)
            ev = [int(e) for e in d["evix"][qi]]
            found = [e for e in ev if e in set(top)]
            missed = [e for e in ev if e not in set(top)]
            c["questions"] += 1
            c["missed_q"] += bool(missed)
            c["evidence"] += len(ev)
            c["any_found_in_q"] += bool(found) and bool(missed)
            top_sess = {int(d["sess"][j]) for j in top}
            sess_top.append(len(top_sess))
            ev_sess.append(len({int(d["sess"][e]) for e in ev}))
            qwords = {w.lower() for w in re.findall(r"[A-Za-z]+", q["q"])}
            topnames = {w for j in top for w in d["names"][j]}
            order = {int(j): r for r, j in enumerate(np.argsort(-s, kind="stable")) if np.isfinite(s[j])}
            who = spoken_by_named(q["q"], dict(enumerate(d["speaker"])))
            c["evidence_by_named_speaker"] += sum(e in who for e in ev)
            cos, bm = d["E"] @ q["e"], L.bm25_vec(d, list(set(q["l"][:32])))
            pool = {int(j) for j in L.make_pool(cos, bm)}
            for e in (e for e in ev if e not in pool):  # where the evidence outside the pool lies
                gap = [abs(e - j) for j in pool if d["sess"][j] == d["sess"][e]]
                c["outside_pool"] += 1
                c["outside_in_pooled_session"] += bool(gap)
                c["outside_beside_pooled"] += min(gap, default=99) <= 1
                c["outside_within2_pooled"] += min(gap, default=99) <= 2
            for e in missed:
                c["missed_by_named_speaker"] += e in who
                ranks.append(order.get(e, 10**6))
                c["missed"] += 1
                c["other_session"] += int(d["sess"][e]) not in top_sess
                c["same_speaker_as_found"] += any(d["speaker"][e] == d["speaker"][f] for f in found)
                c["no_word_q"] += not (d["L"][e] & set(q["l"]))
                c["no_name_q"] += not ({w.lower() for w in d["names"][e]} & qwords)
                c["word_with_found"] += any((d["L"][e] & d["L"][f]) - set(q["l"]) for f in found)
                c["name_with_found"] += any(d["names"][e] & d["names"][f] for f in found)
                c["name_with_top10"] += bool(d["names"][e] & topnames)
    out = {k: v for k, v in c.items()}
    ranks = np.array(ranks)
    out["missed_rank"] = {f"<{k}": int((ranks < k).sum()) for k in (20, 30, 50, 100, 10**6)}
    out["mean_sessions_in_top10"] = float(np.mean(sess_top))
    out["mean_evidence_sessions"] = float(np.mean(ev_sess))
    out["share_multi_session_questions"] = float(np.mean([x > 1 for x in ev_sess]))
    return out


GRIDS = {
    "diversity": {"diversity": (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)},
    "names": {"names": (0.0, 0.1, 0.2, 0.3, 0.5), "names_from": (3, 5, 10)},
    "rare": {"rare": (0.0, 0.15, 0.3, 0.5)},
    "speaker": {"speaker": (0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0, 20.0)},
    "speaker8": {"speaker": (8.0,)},
    "speaker_demoted": {"speaker": (0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0), "demote": (True,)},
    "speaker_diversity": {"speaker": (8.0,), "diversity": (0.0, 0.05, 0.1, 0.2)},
    "speaker_names": {"speaker": (8.0,), "names": (0.0, 0.1, 0.2, 0.3)},
    "speaker_rare": {"speaker": (8.0,), "rare": (0.0, 0.15, 0.3)},
    "names_speaker": {"names": (0.0, 0.2, 0.3), "speaker": (0.0, 0.5, 1.0, 2.0)},
    "speaker_join": {"speaker": (8.0,), "spk_vec": (0, 10, 20, 50, 100), "spk_text": (0, 10, 20, 50, 100)},
    "speaker_sessions": {"speaker": (8.0,), "sess_fill": (0, 1, 2, 3), "sess_named": (False, True)},
    "speaker_beside": {"speaker": (8.0,), "adj_from": (0, 5, 10, 20, 50, 200), "adj_reach": (1, 2)},
    "speaker_beside_named": {"speaker": (8.0,), "adj_from": (0, 5, 10, 20, 50), "adj_reach": (1, 2), "adj_named": (True,)},
    "speaker_beside_cost": {"speaker": (8.0,), "adj_from": (10, 50), "adj_reach": (1, 2), "adj_cost": (0.0, 0.5, 1.0, 2.0, 4.0)},
    "speaker_beside_keep": {"speaker": (8.0,), "adj_from": (0, 5, 10, 20, 50, 200), "adj_reach": (1, 2), "adj_keep": (True,)},
    "speaker_after": {"speaker": (8.0,), "adj_from": (0, 5, 10, 20, 50), "adj_named": (False, True), "adj_after": (True,)},
    "diversity_session": {"diversity": (0.0, 0.05, 0.1, 0.2), "session": (0.5, 0.3, 0.2, 0.0)},
}


def lever(data: list[dict], grid: dict) -> dict:
    points = [dict(zip(grid, p)) for p in itertools.product(*grid.values())]
    per = {}
    joined, outside = {}, 0
    for i, p in enumerate(points):
        rows, joined[i] = [], 0
        for d in data:
            for qi, q in enumerate(d["qa"]):
                s = rank(d, q, **p)
                rows.append((d["sid"], q["cat"], L.recall_at(d["evix"][qi], s, (10,))))
                if q["cat"] == 1:  # multi-hop evidence outside the 200-row pool that joined it
                    base = set(L.make_pool(d["E"] @ q["e"], L.bm25_vec(d, list(set(q["l"][:32])))).tolist())
                    out_ = [int(e) for e in d["evix"][qi] if int(e) not in base]
                    outside += len(out_) if i == 0 else 0
                    joined[i] += sum(bool(np.isfinite(s[e])) for e in out_)
        per[i] = rows
    held, all_, best, chosen = L.loo_grid(per, ks=(10,), k_select=10)
    off = L.summarise(per[0], (10,))
    pick = lambda r: {g: round(r[g][10], 4) for g in ("all", *L.CATS.values())}  # noqa: E731
    return {
        "off": pick(off),
        "held_out": pick(held),
        "fit_on_all": pick(all_),
        "fit_on_all_point": points[best],
        "chosen": {s: points[i] for s, i in chosen.items()},
        "outside_pool": outside,
        "joined": {json.dumps(points[i]): n for i, n in joined.items() if len(points) > 1},
        "points": {json.dumps(points[i]): pick(L.summarise(per[i], (10,))) for i in per if len(points) > 1},
    }


def latency(data_path: str | None, n: int, off: dict, on: dict) -> dict:
    """p50 / p95 ms of search and context, a lever off and on (`off`, `on`: Tuning changes to the
    defaults), alternated per request."""
    import random
    import time

    import httpx

    from app.search.tuning import DEFAULT_TUNING
    from bench.common import pct, serve_in_thread
    from bench.quality.locomo.data import load as load_convs
    from bench.quality.locomo.run import Service

    convs = load_convs(data_path) if data_path else load_convs()
    svc = Service("memscale_bench_multihop_latency", convs, model="local/smollm2")
    for c in convs:
        svc.ingest(c)
    svc.settle()
    http = httpx.Client(base_url=serve_in_thread(svc.app), timeout=60)
    random.seed(1)
    sample = random.sample([(c.sample_id, q.question) for c in convs for q in c.qa], n)
    tunings = {"off": replace(DEFAULT_TUNING, **off), "on": replace(DEFAULT_TUNING, **on)}
    lat: dict = {(p, v): [] for p in ("search", "context") for v in tunings}
    for i, (sid, q) in enumerate(sample * 2):
        h = {"Authorization": f"Bearer {svc.clients[sid].api_key}"}
        for v in ("off", "on") if i % 2 else ("on", "off"):
            svc.app.state.tuning = tunings[v]
            for p, path, body in (
                ("search", "/v1/search", {"query": q, "types": ["episode"], "k": 10}),
                ("context", "/v1/context", {"query": q, "budget_tokens": 1000}),
            ):
                t = time.perf_counter()
                r = http.post(path, json=body, headers=h)
                assert r.status_code == 200, r.text
                if i >= 5:  # the first few warm up
                    lat[(p, v)].append((time.perf_counter() - t) * 1000)
    svc.app.state.tuning = DEFAULT_TUNING
    svc.close()
    return {f"{p} {v}": (round(pct(x, 50), 1), round(pct(x, 95), 1)) for (p, v), x in lat.items()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(
        prog="python -m bench.research.multihop", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=None, help="LoCoMo dev JSON (default: the repository's shared copy)")
    ap.add_argument("--cache", default="/tmp/multihop_cache", help="embeddings and lexemes cache")
    ap.add_argument("--only", default="pattern,diversity,names,rare", help="comma-separated: pattern and lever names")
    ap.add_argument("--latency", type=int, default=0, help="N questions: search and context latency, a lever off and on")
    ap.add_argument("--latency-off", default='{"speaker_weight": 0.0}', help="the Tuning changes that turn the lever off (JSON)")
    ap.add_argument("--latency-on", default="{}", help="the Tuning changes that turn it on (JSON; default: the defaults)")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    out = {}
    if args.latency:
        out["latency"] = latency(args.data, args.latency, json.loads(args.latency_off), json.loads(args.latency_on))
        print("latency p50/p95 ms", json.dumps(out["latency"]), flush=True)
        return out
    data = load(args.data, Path(args.cache))
    for name in args.only.split(","):
        out[name] = pattern(data) if name == "pattern" else lever(data, GRIDS[name])
        print(name, json.dumps(out[name]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
