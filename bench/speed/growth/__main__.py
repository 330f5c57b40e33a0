"""How search's cost grows with one org's memory: the org grows through `--sizes` items (all three
searched types: 40 % memories, 50 % conversation turns, 10 % knowledge chunks; the same
vocabulary and visibility mix at every size, bench/speed/growth/synth.py), and at each size the
same queries are ranked, server-side (in-process against the database, no HTTP), interleaved:

- hybrid, one type (memories), k = 10;
- hybrid, all types, k = 10 (the per-type stages at once on side connections, as served), and
  the same one type after the other (no side connection free: the ranking before it);
- context retrieval: what /v1/context ranks (`app.context.service.retrieved_pieces`, each type
  with its second round, a 2,000-token budget's candidates), without the token fitting: the
  three types at once on side connections, as served, and one after the other;
- over HTTP (bench/speed/growth/over_http.py): the service served in a thread, the same reader and
  queries through `/v1/search` (one type, all types) and `/v1/context`, interleaved with the above;
- vector recall@10 of the service's vector stage against the exact filtered search, for a reader
  in one group and a reader in none.

    .venv/bin/python -m bench.speed.growth [--sizes 1000,10000,50000,100000,200000] [--queries 30]
    .venv/bin/python -m bench.speed.growth --quick        # 1k and 5k items, for the smoke test

Rows and vectors are written by SQL (no embedder): the query vectors are drawn like the rows.
Results: bench/results/growth.json, .md and .png (p50 / p95 against size, log scale). The embedded
server's buffer pool is sized to the machine (app/kit/database/embedded_pg.py);
MEMSCALE_PG_SHARED_BUFFERS=256MB measures the old fixed size.
"""

from __future__ import annotations

import random
import time

import numpy as np
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from bench.command import parser, save
from bench.common import fresh_database, load_average, pct
from bench.speed.growth import synth
from bench.speed.growth.over_http import HTTP_ARMS, Served

SHARES = {"memory": 0.4, "episode": 0.5, "chunk": 0.1}
ARMS = ("one type", "all types", "all types sequential", "context", "context sequential")
SEQUENTIAL = ("all types sequential", "context sequential")  # no side connection free
USERS, GROUPS = 50, 10


def _setup(settings) -> dict:
    from app.kit.database.pg import admin_url
    from app.orgs import service as orgs

    eng = create_engine(admin_url(settings))
    with Session(eng, info={"audit_key": settings.audit_secret()}) as db:
        org = orgs.create_org(db, "growth")
        users = [orgs.create_user(db, org, f"u{i}", groups=["g0"] if i == 0 else []) for i in range(USERS)]
        db.flush()
        key = orgs.create_key(db, users[0])
        asset = db.execute(
            text(
                "INSERT INTO knowledge_assets (org_id, owner_id, kind, source_uri, content_hash, visibility)"
                " VALUES (:o, :u, 'document', 'bench://growth', 'growth', 'org') RETURNING id"
            ),
            {"o": org.id, "u": users[0].id},
        ).scalar_one()
        db.commit()
        out = {
            "org": org.id,
            "users": [u.id for u in users],
            "asset": asset,
            "readers": {"1 group": (users[0].id, ("g0",)), "no group": (users[1].id, ())},
            "key": key,  # the "1 group" reader's, for the HTTP arms
        }
    raw = eng.raw_connection()
    try:
        synth.setup(raw)
        out["queries"] = synth.query_vectors(raw, 200)
    finally:
        raw.close()
        eng.dispose()
    return out


def _grow(settings, world: dict, before: int, after: int) -> float:
    from app.kit.database.pg import admin_url

    eng = create_engine(admin_url(settings))
    raw = eng.raw_connection()
    t0 = time.time()
    try:
        for t, share in SHARES.items():
            synth.grow(raw, world["org"], world["users"], world["asset"], GROUPS, t, int(before * share), int(after * share))
        cur = raw.cursor()
        for table in ("memories", "episodes", "chunks"):
            cur.execute(f"ANALYZE {table}")
        raw.commit()
    finally:
        raw.close()
        eng.dispose()
    return time.time() - t0


def _measure(sessions, served: Served, world: dict, n_queries: int, size: int) -> dict:
    from app.auth.principal import Principal
    from app.context.service import candidates, retrieved_pieces
    from app.kit.database.db import bind_principal
    from app.search import repository as repo
    from app.search.repository import sessions as side
    from app.search.repository.bm25 import visible_count
    from app.search.schemas import SearchFilters
    from app.search.service import RankCall, rank
    from app.search.tuning import DEFAULT_TUNING

    def principal(who: str) -> Principal:
        uid, groups = world["readers"][who]
        return Principal(org_id=world["org"], user_id=uid, name=who, roles=("member",), groups=groups, clearances=())

    p = principal("1 group")
    lat: dict = {a: [] for a in (*ARMS, *HTTP_ARMS)}
    queries = world["queries"][:n_queries]
    for i, (words, vec) in enumerate(queries):
        q = np.array(vec, dtype=np.float32)
        order = [*ARMS, *HTTP_ARMS]
        random.Random(i).shuffle(order)
        for arm in order:
            if arm in HTTP_ARMS:
                t0 = time.perf_counter()
                served.ask(arm, words)
                lat[arm].append((time.perf_counter() - t0) * 1000)
                continue
            with sessions() as db:
                bind_principal(db, p)
                t0 = time.perf_counter()
                held = 0
                while arm in SEQUENTIAL and side.SIDE.acquire(blocking=False):
                    held += 1
                if arm.startswith("context"):
                    retrieved_pieces(db, RankCall(principal=p, query=words, qvec=q, k=candidates(2000), second_round=True))
                else:
                    rank(
                        db,
                        RankCall(
                            principal=p,
                            query=words,
                            qvec=q,
                            k=10,
                            types=("memory",) if arm == "one type" else ("memory", "episode", "chunk"),
                        ),
                    )
                lat[arm].append((time.perf_counter() - t0) * 1000)
                for _ in range(held):
                    side.SIDE.release()
                db.rollback()
    recall = {}
    for who in world["readers"]:
        rp, got = principal(who), []
        with sessions() as db:
            bind_principal(db, rp)
            n = visible_count(db, rp, "memory", SearchFilters())
            db.rollback()
        for _, vec in queries:
            with sessions() as db:
                bind_principal(db, rp)
                mode = "exact" if n <= DEFAULT_TUNING.exact_below else "split"  # as the ranking chooses
                fast, _ = repo.vector_ids(db, rp, "memory", np.array(vec), SearchFilters(), 10, ef_search=100, mode=mode)
                truth, _ = repo.vector_ids(db, rp, "memory", np.array(vec), SearchFilters(), 10, ef_search=100, mode="exact")
                db.rollback()
            got.append(len({r.id for r in fast} & {r.id for r in truth}) / max(1, len(truth)))
        recall[who] = {"visible_memories": n, "recall@10": round(float(np.mean(got)), 4)}
    return {
        "items": size,
        **{a: {"p50_ms": round(pct(v, 50), 1), "p95_ms": round(pct(v, 95), 1)} for a, v in lat.items()},
        "vector_recall": recall,
    }


def run(args) -> dict:
    from app.kit.database.db import make_engine, make_sessionmaker
    from app.kit.database.pg import app_url

    load = load_average()
    settings = fresh_database("memscale_bench_growth_quick" if args.quick else "memscale_bench_growth")
    world = _setup(settings)
    eng = make_engine(app_url(settings), pool_size=4)
    sessions = make_sessionmaker(eng)
    served = Served(settings, world["queries"], world["key"])
    rows, before = [], 0
    try:
        for size in args.sizes:
            took = _grow(settings, world, before, size)
            before = size
            if not rows:
                served.warm(world["queries"][-1][0])  # a query outside the measured ones
            r = _measure(sessions, served, world, args.queries, size)
            r["grow_s"] = round(took, 1)
            rows.append(r)
            print(
                f"{size} items: "
                + ", ".join(f"{a} {r[a]['p50_ms']}/{r[a]['p95_ms']} ms" for a in (*ARMS, *HTTP_ARMS))
                + f"; recall {r['vector_recall']}",
                flush=True,
            )
    finally:
        served.close()
        eng.dispose()
    return {
        "sizes": args.sizes,
        "queries": args.queries,
        "shared_buffers": _shared_buffers(settings),
        "load": {"start": load, "end": load_average()},
        "rows": rows,
    }


def _shared_buffers(settings) -> str:
    from app.kit.database.pg import admin_url

    eng = create_engine(admin_url(settings))
    try:
        with eng.connect() as c:
            return c.execute(text("SHOW shared_buffers")).scalar_one()
    finally:
        eng.dispose()


def markdown(res: dict) -> str:
    load = res["load"]
    lines = [
        f"Search cost as one org grows ({res['queries']} queries, shared_buffers {res['shared_buffers']}, load"
        f" {load['start']} at the start, {load['end']} at the end); p50 / p95 ms",
        "",
        "Server-side:",
        "",
        "| items | hybrid one type | hybrid all types | all types one after the other | context retrieval |"
        " context, types one after the other | vector recall@10 (1 group / no group) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        rec = " / ".join(f"{v['recall@10']:.3f}" for v in r["vector_recall"].values())
        lines.append(f"| {r['items']:,} | " + " | ".join(f"{r[a]['p50_ms']} / {r[a]['p95_ms']}" for a in ARMS) + f" | {rec} |")
    lines += [
        "",
        "Over HTTP (the same reader and queries, interleaved with the above):",
        "",
        "| items | /v1/search one type | /v1/search all types | /v1/context |",
        "|---|---|---|---|",
    ]
    for r in res["rows"]:
        lines.append(f"| {r['items']:,} | " + " | ".join(f"{r[a]['p50_ms']} / {r[a]['p95_ms']}" for a in HTTP_ARMS) + " |")
    last = res["rows"][-1]  # against 10k items, the target's base, where measured
    first = next((r for r in res["rows"] if r["items"] == 10_000), res["rows"][0])
    ratio = last["one type"]["p95_ms"] / first["one type"]["p95_ms"]
    lines += ["", f"p95 one type server-side, {last['items']:,} / {first['items']:,} items: {ratio:.2f}x"]
    return "\n".join(lines)


def plot(res: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    sizes = [r["items"] for r in res["rows"]]
    for arm, colour in zip(ARMS, ("tab:blue", "tab:orange", "tab:red", "tab:green", "tab:olive")):
        ax.plot(sizes, [r[arm]["p95_ms"] for r in res["rows"]], "o-", color=colour, label=f"{arm} p95")
        ax.plot(sizes, [r[arm]["p50_ms"] for r in res["rows"]], "o--", color=colour, alpha=0.5, label=f"{arm} p50")
    for arm, colour in zip(HTTP_ARMS, ("tab:blue", "tab:orange", "tab:green")):
        ax.plot(sizes, [r[arm]["p95_ms"] for r in res["rows"]], "s:", color=colour, label=f"{arm} p95")
    ax.set_xscale("log")
    ax.set_xlabel("items in the org")
    ax.set_ylabel("ms (server-side; dotted: over HTTP)")
    ax.set_title("memscale search latency as one org grows")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = parser(__doc__, "growth")
    ap.add_argument("--sizes", default="1000,10000,50000,100000,200000", help="org sizes in items, comma-separated, growing")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="1k and 5k items, 8 queries (the smoke test)")
    args = ap.parse_args(argv)
    args.sizes = [1000, 5000] if args.quick else sorted(int(s) for s in args.sizes.split(","))
    if args.quick:
        args.queries = min(args.queries, 8)
    res = run(args)
    return save(args.out, res, markdown(res), plot)


if __name__ == "__main__":
    main()
