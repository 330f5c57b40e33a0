"""The memory manager, learned vs rules, on LoCoMo dev conversations (leave one conversation out).

    python -m bench.quality.manager [--data PATH] [--k 5] [--misled 1.0 0.25] [--out FILE.json]

Each conversation is played turn by turn into a memory store of its own: every turn is a
candidate memory, compared with the store's nearest memories (app/manager/features.py: cosine
top-1 / top-3, lexical overlap, the near-duplicate and contradiction verdicts, sources merged
into the neighbour, the gap in days between the sessions, the turn's length and values), and the
policy decides: store as new, merge into the nearest memory (it then also holds this turn),
supersede it (the new memory replaces it), or drop the turn. No feedback exists while a store is
built, so the neighbours' utility is absent (the feature is constant here).

Reward, from ground truth: every question of the conversation (with its evidence turns) retrieves
the top k memories by cosine; a memory that was served and holds an evidence turn of that
question helped (+1); one that never helped but filled a slot of a question that found no
evidence misled (-`misled`: 1, as the service's symmetric reward, and 0.25, a milder cost of
clutter); any other memory is unlabelled (left out of training, as in the service). A decision's
reward is that of the memory it produced or fed (a drop: 0). The policy is trained (app/manager/policy.py `fit`, the service's
own code) on the rules' decisions in the other conversations and run on the held-out one.

Reported per held-out conversation and in total, learned vs rules: the hit rate (questions with an
evidence turn in the top k), the mean decision reward, the memory count, and the share of
decisions where the learned policy differs from the rules.

Then the residual policy (app/manager/residual.py, what training stores): the rules, or a drop of
a turn the rules would store when P(helped) is below a threshold. Labels: helped (+1) against
everything else, a memory never served included (in this bench every question is judged, so a
memory no question was served is known not to have helped). Every weight and the threshold are
fitted without the held-out conversation (the threshold by leave one conversation out among the
other four, the quality being the questions hit); reported per held-out conversation, with the
in-sample figures and a paired bootstrap CI over questions of the hit-rate difference.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.manager import residual
from app.manager.features import DISTILL, Candidate, Neighbour, features
from app.manager.policy import DROP, MERGE, NEW, RULES, SUPERSEDE, LearnedPolicy, Row, fit
from app.memories.near_duplicates import repeats_stored
from bench.quality.locomo.data import load
from pipelines.consolidation.rules import contradicts

DATA = Path("/work/shared/data/locomo/locomo_dev.json")


@dataclass
class Mem:
    text: str
    vec: np.ndarray
    turns: set[str]
    at: object
    active: bool = True


@dataclass
class Played:
    """One conversation played under one policy: the memories, the decisions (features, action,
    the rules' action, index of the memory it produced or fed, or None) and the outcome."""

    mems: list[Mem] = field(default_factory=list)
    decisions: list[tuple[dict, str, str, int | None]] = field(default_factory=list)
    hits: int = 0
    questions: int = 0
    hit_list: list[bool] = field(default_factory=list)  # per question, in order
    rewards: dict[int, float] = field(default_factory=dict)


def play(conv, vecs: np.ndarray, policy) -> Played:
    out = Played()
    for t, v in zip(conv.turns, vecs):
        live = [i for i, m in enumerate(out.mems) if m.active]
        nbs: list[tuple[int, float]] = []
        if live:
            sims = np.stack([out.mems[i].vec for i in live]) @ v
            order = np.argsort(-sims)[:3]
            nbs = [(live[j], float(sims[j])) for j in order]
        first = out.mems[nbs[0][0]] if nbs else None
        c = Candidate(
            stage=DISTILL,
            text=t.text,
            kind="fact",
            visibility="private",
            confidence=0.8,
            n_sources=1,
            recorded_at=t.at,
            repeats=bool(first) and repeats_stored(first.text, 1.0 - nbs[0][1], t.text),
            conflicts=bool(first) and contradicts(first.text, t.text),
            neighbours=tuple(Neighbour(None, out.mems[i].text, s, len(out.mems[i].turns), None, out.mems[i].at) for i, s in nbs),
        )
        f = features(c)
        action, rules = policy.decide(f), RULES.decide(f)
        if action in (MERGE, SUPERSEDE) and first is None:
            action = NEW
        fed = None
        if action == MERGE:
            fed = nbs[0][0]
            out.mems[fed].turns.add(t.dia_id)
            out.mems[fed].at = t.at
        elif action in (NEW, SUPERSEDE):
            if action == SUPERSEDE:
                out.mems[nbs[0][0]].active = False
            out.mems.append(Mem(t.text, v, {t.dia_id}, t.at))
            fed = len(out.mems) - 1
        out.decisions.append((f, action, rules, fed))
    return out


def score(conv, qvecs: np.ndarray, played: Played, k: int, misled: float) -> None:
    """Serve each question the top k active memories; hits, and each memory's reward: +1 if it
    helped a question, -`misled` if it never helped and filled a slot of a question that failed."""
    live = [i for i, m in enumerate(played.mems) if m.active]
    helped: set[int] = set()
    crowded: set[int] = set()
    if live:
        mat = np.stack([played.mems[i].vec for i in live])
        for qa, qv in zip(conv.qa, qvecs):
            top = [live[j] for j in np.argsort(-(mat @ qv))[:k]]
            good = [i for i in top if played.mems[i].turns & set(qa.evidence)]
            helped.update(good)
            played.hits += bool(good)
            played.hit_list.append(bool(good))
            if not good:
                crowded.update(top)
    played.questions = len(conv.qa)
    played.hit_list += [False] * (played.questions - len(played.hit_list))
    played.rewards = {i: 1.0 for i in helped} | {i: -misled for i in crowded - helped}


def rows(played: Played) -> list[Row]:
    """Labelled decisions: those whose memory was served (drops and never-served are left out)."""
    return [Row(f, a, r, abs(r)) for f, a, _, i in played.decisions if i is not None and (r := played.rewards.get(i))]


def summary(played: Played) -> dict:
    r = [played.rewards.get(i, 0.0) if i is not None else 0.0 for _, _, _, i in played.decisions]
    return {
        "hit_rate": round(played.hits / max(1, played.questions), 4),
        "reward": round(float(np.mean(r)) if r else 0.0, 4),
        "memories": sum(m.active for m in played.mems),
        "differ": round(float(np.mean([a != ra for _, a, ra, _ in played.decisions])) if played.decisions else 0.0, 4),
        "dropped": sum(a == DROP for _, a, _, _ in played.decisions),
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--misled", type=float, nargs="+", default=[1.0, 0.25], help="penalty of a memory that misled (helped: +1)")
    args = ap.parse_args(argv)
    from app.config import Settings
    from app.kit.runtime.embedding import make_embedder

    t0 = time.perf_counter()
    convs = load(args.data)
    embedder = make_embedder(Settings())
    tv = [np.asarray(embedder.embed([t.text for t in c.turns]), dtype=np.float32) for c in convs]
    embed_q = getattr(embedder, "embed_queries", embedder.embed)
    qv = [np.asarray(embed_q([q.question for q in c.qa]), dtype=np.float32) for c in convs]
    runs = {str(m): run(convs, tv, qv, k=args.k, misled=m) for m in args.misled}
    report = {"k": args.k, "conversations": len(convs), "runs": runs, "residual": run_residual(convs, tv, qv, k=args.k)}
    report["seconds"] = round(time.perf_counter() - t0, 1)
    _print(report)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    return report


def run(convs, tv, qv, *, k: int, misled: float) -> dict:
    """Leave one conversation out under one reward: learned vs rules per held-out conversation."""
    rules_played = []
    for c, v, q in zip(convs, tv, qv):
        p = play(c, v, RULES)
        score(c, q, p, k, misled)
        rules_played.append(p)
    per = []
    for h, (c, v, q) in enumerate(zip(convs, tv, qv)):
        train = [r for j, p in enumerate(rules_played) if j != h for r in rows(p)]
        t1 = time.perf_counter()
        learned = LearnedPolicy(fit(train))
        fit_s = time.perf_counter() - t1
        lp = play(c, v, learned)
        score(c, q, lp, k, misled)
        per.append(
            {
                "heldout": c.sample_id,
                "train_rows": len(train),
                "fit_s": round(fit_s, 3),
                "rules": summary(rules_played[h]),
                "learned": summary(lp),
            }
        )
    total = {
        side: {
            "hit_rate": round(float(np.mean([p[side]["hit_rate"] for p in per])), 4),
            "reward": round(float(np.mean([p[side]["reward"] for p in per])), 4),
            "memories": int(sum(p[side]["memories"] for p in per)),
            "differ": round(float(np.mean([p[side]["differ"] for p in per])), 4),
        }
        for side in ("rules", "learned")
    }
    wins = (
        total["learned"]["hit_rate"] >= total["rules"]["hit_rate"] and total["learned"]["memories"] <= total["rules"]["memories"]
    )
    verdict = (
        "learned >= rules on hit rate at <= their memory count"
        if wins and total["learned"]["reward"] > total["rules"]["reward"]
        else "learned does not beat the rules: the rules stay the default"
    )
    return {"misled": misled, "per_conversation": per, "mean": total, "verdict": verdict}


def residual_rows(played: Played) -> list[Row]:
    """Every decision with the reward of its memory, 0 for one never served (it never helped)."""
    return [Row(f, a, played.rewards.get(i, 0.0) if i is not None else 0.0) for f, a, _, i in played.decisions]


def _play_scored(conv, v, q, policy, k: int) -> Played:
    p = play(conv, v, policy)
    score(conv, q, p, k, 1.0)
    return p


def run_residual(convs, tv, qv, *, k: int, seed: int = 0) -> dict:
    """The residual policy (app/manager/residual.py), leave one conversation out: for each held-out
    conversation the threshold is chosen by leave one conversation out among the other four (each
    inner fold fits the model on three and plays the fourth), then the model is fitted on all four
    at that threshold and plays the held-out one. Quality is the number of questions hit. Also the
    in-sample figures (model and threshold fitted on all conversations, played on them) and the
    paired bootstrap CI (over questions) of the held-out hit-rate difference, learned - rules."""
    rules_played = [_play_scored(c, v, q, RULES, k) for c, v, q in zip(convs, tv, qv)]
    rows_of = [residual_rows(p) for p in rules_played]
    fitted: dict = {}

    def evaluate(fold, t: float) -> tuple[float, float]:
        train, j = fold
        if t == 0:  # threshold 0 is the rules
            return rules_played[j].hits, summary(rules_played[j])["memories"]
        w = fitted.setdefault(train, residual.fit([r for i in train for r in rows_of[i]]))
        p = _play_scored(convs[j], tv[j], qv[j], residual.ResidualPolicy(residual.at(w, t)), k)
        return p.hits, summary(p)["memories"]

    n = range(len(convs))
    per, pairs = [], []
    for h in n:
        train = tuple(i for i in n if i != h)
        t, table = residual.choose_threshold([(tuple(i for i in train if i != j), j) for j in train], evaluate)
        w = residual.fit([r for i in train for r in rows_of[i]], threshold=t)
        lp = _play_scored(convs[h], tv[h], qv[h], residual.ResidualPolicy(w), k)
        pairs += list(zip(lp.hit_list, rules_played[h].hit_list))
        per.append({"heldout": convs[h].sample_id, "threshold": t, "rules": summary(rules_played[h]), "learned": summary(lp)})
    t_in, _ = residual.choose_threshold([(tuple(i for i in n if i != j), j) for j in n], evaluate)
    w_in = residual.fit([r for i in n for r in rows_of[i]], threshold=t_in)
    ins = [_play_scored(c, v, q, residual.ResidualPolicy(w_in), k) for c, v, q in zip(convs, tv, qv)]
    diff = np.array([float(a) - float(b) for a, b in pairs])
    rng = np.random.default_rng(seed)
    boot = [float(diff[rng.integers(0, len(diff), len(diff))].mean()) for _ in range(2000)]
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return {
        "per_conversation": per,
        "mean": {side: _mean(per, side) for side in ("rules", "learned")},
        "pooled_hit_rate": {
            "rules": round(float(np.mean([b for _, b in pairs])), 4),
            "learned": round(float(np.mean([a for a, _ in pairs])), 4),
        },
        "paired_diff": {
            "mean": round(float(diff.mean()), 4),
            "ci95": [round(float(lo), 4), round(float(hi), 4)],
            "questions": len(diff),
        },
        "in_sample": {
            "threshold": t_in,
            "rules": {"hits": sum(p.hits for p in rules_played), "memories": sum(summary(p)["memories"] for p in rules_played)},
            "learned": {"hits": sum(p.hits for p in ins), "memories": sum(summary(p)["memories"] for p in ins)},
            "questions": sum(p.questions for p in ins),
        },
    }


def _mean(per: list[dict], side: str) -> dict:
    return {
        "hit_rate": round(float(np.mean([p[side]["hit_rate"] for p in per])), 4),
        "memories": int(sum(p[side]["memories"] for p in per)),
        "differ": round(float(np.mean([p[side]["differ"] for p in per])), 4),
    }


def _print_residual(r: dict) -> None:
    print("Residual policy (drop where P(helped) < threshold, else the rules), leave one conversation out")
    print(f"{'held out':10} {'thresh':>6} {'policy':8} {'hit rate':>8} {'memories':>9} {'differ':>7}")
    for p in r["per_conversation"]:
        for side in ("rules", "learned"):
            s = p[side]
            print(f"{p['heldout']:10} {p['threshold']:6.2f} {side:8} {s['hit_rate']:8.3f} {s['memories']:9d} {s['differ']:7.3f}")
    for side in ("rules", "learned"):
        s = r["mean"][side]
        print(f"{'mean':10} {'':6} {side:8} {s['hit_rate']:8.3f} {s['memories']:9d} {s['differ']:7.3f}")
    d = r["paired_diff"]
    print(
        f"pooled hit rate {r['pooled_hit_rate']}; learned - rules {d['mean']:+.4f},",
        f"95% CI {d['ci95']} over {d['questions']} questions (paired bootstrap)",
    )
    print(f"in sample: {r['in_sample']}")


def _print(report: dict) -> None:
    for run_ in report["runs"].values():
        print(f"LoCoMo dev, leave one conversation out, top {report['k']}, reward +1 helped / -{run_['misled']} misled")
        print(f"{'held out':10} {'policy':8} {'hit rate':>8} {'reward':>8} {'memories':>9} {'differ':>7} {'dropped':>8}")
        for p in run_["per_conversation"]:
            for side in ("rules", "learned"):
                s = p[side]
                print(
                    f"{p['heldout']:10} {side:8} {s['hit_rate']:8.3f} {s['reward']:8.3f} {s['memories']:9d} "
                    f"{s['differ']:7.3f} {s['dropped']:8d}"
                )
        for side in ("rules", "learned"):
            s = run_["mean"][side]
            print(f"{'mean':10} {side:8} {s['hit_rate']:8.3f} {s['reward']:8.3f} {s['memories']:9d} {s['differ']:7.3f}")
        print(run_["verdict"])
    _print_residual(report["residual"])
    print(f"({report['seconds']} s)")


if __name__ == "__main__":
    main()
