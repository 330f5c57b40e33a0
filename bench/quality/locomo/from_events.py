"""Evidence recall of a LoCoMo run read back from the service's own retrieval events.

    .venv/bin/python -m bench.quality.locomo.from_events DB_NAME [DB_NAME ...] [--data PATH]

Every /v1/search and /v1/context call records what it handed out (ids, scores, in order) as a
retrieval event, so the recall figures of a run can be recovered from its database even when
the run did not finish (a shared machine, a deadline). The bench asks each question's methods in
a fixed order (context at each budget, then vector, text, hybrid search), so the i-th event of a
method answers the i-th question; the query text is checked against it. Recall@k and evidence
in context follow the bench's rule (context items ranked by score; every handed-out item is in
context); latencies are not recorded in events, so none are reported here. `--pass i` reads the
i-th repetition of a method, i.e. the ablation variants that ran it, in the bench's order.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from statistics import mean


def read(db_name: str, convs: dict, pass_: int = 0) -> list[dict]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from app.config import Settings
    from app.kit.database.pg import admin_url

    eng = create_engine(make_url(admin_url(Settings())).set(database=db_name))
    with eng.connect() as c:
        users = dict(c.execute(text("SELECT id, name FROM users")).all())
        dia = {str(i): d for i, d in c.execute(text("SELECT id, metadata->>'dia_id' FROM episodes")).all()}
        events = c.execute(text("SELECT actor_id, kind, query, params, items FROM retrieval_events ORDER BY at, id")).all()
    eng.dispose()
    by_method: dict[tuple, list] = defaultdict(list)
    for e in events:
        m = f"context@{e.params['budget_tokens']}" if e.kind == "context" else e.params.get("mode")
        by_method[(users[e.actor_id], m)].append(e)
    rows = []
    for (user, m), evs in by_method.items():
        conv = convs[user]
        n = len(conv.qa)
        for q, e in zip(conv.qa, evs[pass_ * n : (pass_ + 1) * n]):  # pass 0: the main pass
            assert e.query == q.question, (user, m, e.query, q.question)
            items = e.items if e.kind == "search" else sorted(e.items, key=lambda i: -i["score"])
            ranked = [dia[i["id"]] for i in items if i["type"] == "episode" and i["id"] in dia]
            given = set(ranked) if e.kind == "context" else set(ranked[:10])
            ev = q.evidence
            rows.append(
                {
                    "conversation": user,
                    "category": q.category,
                    "method": m,
                    "question": q.question,
                    **{f"recall@{k}": sum(x in ranked[:k] for x in ev) / len(ev) for k in (5, 10, 25)},
                    "recall_in_context": sum(x in given for x in ev) / len(ev),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    from bench.quality.locomo.data import load

    ap = argparse.ArgumentParser(
        prog="python -m bench.quality.locomo.from_events",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("databases", nargs="+")
    ap.add_argument("--data", default=None)
    ap.add_argument(
        "--pass",
        dest="pass_",
        type=int,
        default=0,
        help="0: the main pass; i: the i-th ablation variant that ran the method (in the bench's ABLATIONS order)",
    )
    args = ap.parse_args(argv)
    convs = {c.sample_id: c for c in (load(args.data) if args.data else load())}
    rows = [r for db in args.databases for r in read(db, convs, args.pass_)]
    methods = sorted({r["method"] for r in rows})
    done = {m: {(r["conversation"], r["question"]) for r in rows if r["method"] == m} for m in methods}
    common = set.intersection(*done.values())  # questions every method answered
    rows = [r for r in rows if (r["conversation"], r["question"]) in common]
    n = len({(r["conversation"], r["question"]) for r in rows})
    print(f"{n} questions answered by every method ({len(args.databases)} database(s))")
    print("| method | r@5 | r@10 | r@25 | in context | r@10 per category 1 / 2 / 3 / 4 |\n|---|---|---|---|---|---|")
    for m in methods:
        sub = [r for r in rows if r["method"] == m]
        cats = " / ".join(
            f"{mean(r['recall@10'] for r in sub if r['category'] == c):.3f}" for c in sorted({r["category"] for r in sub})
        )
        print(
            f"| {m} | {mean(r['recall@5'] for r in sub):.3f} | {mean(r['recall@10'] for r in sub):.3f} | "
            f"{mean(r['recall@25'] for r in sub):.3f} | {mean(r['recall_in_context'] for r in sub):.3f} | {cats} |"
        )
    return rows


if __name__ == "__main__":
    main()
