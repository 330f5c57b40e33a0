"""Where one batch write goes, stage by stage, beside the embedder alone on the same texts.

    .venv/bin/python -m bench.speed.ingest_profile [--orgs 1000,20000] [--batches 25,250] [--repeats 3]
        [--bulk 2000,20000 [--pairs 2]] [--staging 20,200,2000] [--locomo 2 [--word-vectors on|off|ab [--rounds R]]]

For each org size (episodes already in the org) and batch size, fresh LoCoMo turns are written
through the real write path (`app.episodes.service.ingest`, what POST /v1/episodes/batch calls,
in the app's own sessions and fair embedding lane), with the stage timer (app/kit/stages.py) on:
validation, vocabulary lookup, fairness queueing, the model's time for the items and for their
new vocabulary, row and index writes, vocabulary upkeep, audit, idempotency, commit. `validate`
is the request body's parse (pydantic, as FastAPI does it); lineage has no stage because a new
episode derives from nothing. Stages in a pipeline overlap, so they may add up to more than the
wall time (`total`). `embedder alone` embeds the same texts in one call of the bare model.
`--bulk N[,N]` times `memscale admin import`'s path (app/episodes/bulk.py) for N turns in
`--pairs` interleaved pairs beside the bare model on the same texts sliced as the import slices
them (bench/speed/ingest_bulk.py); `--staging N[,N]` compares unnest and COPY for an asset's chunks;
`--locomo N` the LoCoMo ingest rate through the API, as `memscale bench locomo` ingests, with the
same stage breakdown (recorded around the app: `request` is the HTTP layer, JSON and the commit).

An org is filled with its first `--real` turns through the same write path (so its vocabulary is
real), then up to its size with rows derived in SQL (text of one seed turn plus words of another,
embedding the sum of theirs): the indexes (HNSW, GIN per partition) hold as many rows as the org.
Results: bench/results/ingest_profile.json (or `--out`).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

from sqlalchemy import create_engine, text

STAGES = (
    "request",
    "validate",
    "validation",
    "vocabulary",
    "embed.fairness",
    "embed.model",
    "embed",
    "embed.wait",
    "vocabulary.embed.fairness",
    "vocabulary.embed.model",
    "vocabulary.embed",
    "idempotency",
    "rows",
    "vocabulary.write",
    "lineage",
    "audit",
    "commit",
)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.speed.ingest_profile", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--orgs", default="1000,20000", help="episodes in the org before the measured writes")
    ap.add_argument("--batches", default="25,250", help="items per measured batch")
    ap.add_argument("--repeats", type=int, default=3, help="measured batches per (org, batch size)")
    ap.add_argument("--real", type=int, default=600, help="seed turns written through the service per org")
    ap.add_argument(
        "--import-items",
        type=int,
        default=0,
        dest="import_items",
        help="also time a bulk import (app/episodes/bulk.py) of this many turns into a new org (= --bulk N)",
    )
    ap.add_argument(
        "--bulk",
        default="",
        help="bulk import sizes (e.g. 2000,20000): per size, --pairs interleaved pairs (embedder alone, import)",
    )
    ap.add_argument("--pairs", type=int, default=2, help="interleaved (embedder alone, import) pairs per --bulk size")
    ap.add_argument(
        "--staging",
        default="",
        help="chunk counts (e.g. 20,200,2000): one asset's chunks written by INSERT ... SELECT FROM unnest and by "
        "COPY into a staging table, interleaved, each in a transaction rolled back (triggers and indexes included)",
    )
    ap.add_argument(
        "--locomo",
        type=int,
        default=0,
        help="also ingest this many LoCoMo conversations through the API (bench.locomo_bench's Service), "
        "each beside the embedder alone on its turns",
    )
    ap.add_argument(
        "--word-vectors",
        choices=("on", "off", "ab"),
        default="on",
        dest="word_vectors",
        help="--locomo with the public word list's table (as served), without, or alternating passes of both",
    )
    ap.add_argument("--rounds", type=int, default=1, help="pairs of passes with --word-vectors ab")
    ap.add_argument("--data", default=None, help="LoCoMo json (default: bench.locomo's)")
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def _turns(path: str | None) -> list[str]:
    from bench.quality.locomo.data import load

    return [t.text for c in (load(path) if path else load()) for t in c.turns]


def _items(texts: list[str]) -> list[dict]:
    return [{"kind": "conversation", "content": t, "session_id": "bench", "visibility": "private"} for t in texts]


class Harness:
    """The app's resources (sessions, fair embedder) in this process, one org per size."""

    def __init__(self, name: str):
        from fastapi.testclient import TestClient

        from app.main import create_app
        from bench.common import fresh_database

        self.settings = fresh_database(name).model_copy(update={"log_level": "WARNING", "max_batch_items": 2000})
        self.app = create_app(self.settings)
        self.http = TestClient(self.app)
        self.http.__enter__()  # runs the lifespan: engine, sessions, embedder
        self.state = self.app.state

    def close(self) -> None:
        self.http.__exit__(None, None, None)

    def principal(self, label: str):
        from sqlalchemy.orm import Session

        from app.kit.database.pg import admin_url
        from app.orgs import service as orgs

        eng = create_engine(admin_url(self.settings))
        with Session(eng, expire_on_commit=False, info={"audit_key": self.settings.audit_secret()}) as db:
            org = orgs.create_org(db, label)
            key = orgs.create_key(db, orgs.create_user(db, org, "writer"))
            db.commit()
        eng.dispose()
        with self.state.sessions() as db:
            return orgs.resolve_key(db, key)

    def write(self, principal, texts: list[str], stages=None) -> float:
        """One batch through the write path, committed; wall seconds."""
        from app.episodes import service
        from app.episodes.schemas import BatchOut, EpisodeBatchIn
        from app.kit.database.db import bind_principal, transaction
        from app.kit.stages import recording, stage

        t0 = time.perf_counter()
        with recording(stages) as rec:
            with stage("validate"):
                body = EpisodeBatchIn.model_validate({"items": _items(texts)})
            with transaction(self.state.sessions) as db:
                bind_principal(db, principal)
                service.ingest(
                    db,
                    self.state.embedder,
                    principal,
                    body.items,
                    endpoint="episodes.batch",
                    body=body,
                    idempotency_key=None,
                    ttl_s=3600,
                    reply=lambda rows: BatchOut(ids=[r.id for r in rows]),
                )
                t_commit = time.perf_counter()
            rec.add("commit", time.perf_counter() - t_commit)
        return time.perf_counter() - t0

    def bulk_import(self, principal, texts: list[str], stages) -> float:
        """`memscale admin import` of `texts`, committed; wall seconds (the file's parse included)."""
        import json

        from app.episodes import bulk
        from app.kit.database.db import bind_principal, transaction
        from app.kit.stages import recording, stage

        lines = [json.dumps(i) for i in _items(texts)]
        t0 = time.perf_counter()
        with recording(stages) as rec:
            with stage("validate"):
                items = bulk.parse_lines(lines)
            bare = getattr(self.state.embedder, "inner", self.state.embedder)
            with transaction(self.state.sessions) as db:
                bind_principal(db, principal)
                bulk.import_items(db, bare, principal, items)
                t_commit = time.perf_counter()
            rec.add("commit", time.perf_counter() - t_commit)
        return time.perf_counter() - t0

    def fill(self, principal, size: int) -> None:
        """Derived rows up to `size` episodes in the org (see the module docstring)."""
        from app.kit.database.pg import admin_url

        eng = create_engine(admin_url(self.settings), isolation_level="AUTOCOMMIT")
        with eng.connect() as c:
            have = c.execute(text("SELECT count(*) FROM episodes WHERE org_id = :o"), {"o": principal.org_id}).scalar()
            if size > have:
                c.execute(
                    text("""
                    WITH seed AS (SELECT row_number() OVER (ORDER BY id) AS n, content, embedding FROM episodes
                                  WHERE org_id = :o), k AS (SELECT count(*) AS k FROM seed)
                    INSERT INTO episodes (id, org_id, owner_id, kind, content, session_id, occurred_at, created_at,
                                          visibility, groups, labels, metadata, embedding)
                    SELECT gen_random_uuid(), :o, :u, 'conversation',
                           a.content || ' ' || array_to_string((string_to_array(b.content, ' '))[1:8], ' '),
                           'fill', now(), now(), 'private', '{}', '{}', '{}', a.embedding + b.embedding
                    FROM generate_series(1, :n) g CROSS JOIN k
                    JOIN seed a ON a.n = 1 + (g::bigint * 7919) % k.k
                    JOIN seed b ON b.n = 1 + (g::bigint * 104729 + g / k.k) % k.k"""),
                    {"o": principal.org_id, "u": principal.user_id, "n": size - have},
                )
            c.execute(text("ANALYZE episodes"))
        eng.dispose()


def _alone(embedder, texts: list[str]) -> float:
    t0 = time.perf_counter()
    embedder.embed(texts)
    return time.perf_counter() - t0


def bulk_sizes(a: argparse.Namespace) -> list[int]:
    return [int(x) for x in a.bulk.split(",") if x] + ([a.import_items] if a.import_items else [])


def main(argv: list[str] | None = None) -> dict:
    from bench.common import load_average, write_result

    a = parse(argv)
    orgs = [int(x) for x in a.orgs.split(",") if x]
    batches = [int(x) for x in a.batches.split(",") if x]
    turns = _turns(a.data)
    out = {"load_before": load_average(), "cases": []}
    if orgs or a.staging or bulk_sizes(a):
        _harness_cases(a, orgs, batches, turns, out)
    if a.locomo:
        from bench.speed.ingest_locomo import locomo_rate

        out["locomo"] = locomo_rate(a.data, a.locomo, a.word_vectors, a.rounds)
    out["load_after"] = load_average()
    write_result("ingest_profile", out, a.out)
    return out


def _harness_cases(a: argparse.Namespace, orgs: list[int], batches: list[int], turns: list[str], out: dict) -> None:
    """The batch writes into orgs of each size, the staging comparison and the bulk imports."""
    from app.kit.stages import Stages
    from bench.speed.ingest_bulk import bulk_pairs, staging

    h = Harness("memscale_bench_ingest_profile")
    bare = getattr(h.state.embedder, "inner", h.state.embedder)
    try:
        fresh = itertools.cycle(range(len(turns)))
        for size in orgs:
            p = h.principal(f"org{size}")
            seed = turns[: min(a.real, size)]
            t0 = time.perf_counter()
            for i in range(0, len(seed), 250):
                h.write(p, seed[i : i + 250])
            h.fill(p, size)
            print(f"org of {size} episodes ready in {time.perf_counter() - t0:.0f} s", flush=True)
            for n in batches:
                walls, alones, rec = [], [], Stages()
                for _ in range(a.repeats):
                    texts = [turns[next(fresh)] for _ in range(n)]
                    alones.append(_alone(bare, texts))
                    walls.append(h.write(p, texts, rec))
                case = {
                    "org": size,
                    "batch": n,
                    "repeats": a.repeats,
                    "total_ms": round(1000 * statistics.mean(walls), 1),
                    "embedder_alone_ms": round(1000 * statistics.mean(alones), 1),
                    "stages_ms": {k: round(1000 * v / a.repeats, 1) for k, v in rec.seconds.items()},
                }
                case["ratio"] = round(case["total_ms"] / case["embedder_alone_ms"], 2)
                out["cases"].append(case)
                _print(case)
        if a.staging:
            out["staging"] = staging(h, turns, [int(x) for x in a.staging.split(",")])
        for n in bulk_sizes(a):
            out["cases"] += bulk_pairs(h, bare, turns, n, a.pairs)
    finally:
        h.close()


def _print(case: dict) -> None:
    st = case["stages_ms"]
    what = (
        f"bulk import of {case['batch']} (pair {case.get('pair', 1)}, load {case.get('load')})"
        if case.get("import")
        else f"org {case['org']:>7} episodes, batch {case['batch']:>4}"
    )
    print(
        f"\n{what}: {case['total_ms']:8.1f} ms per batch, embedder alone {case['embedder_alone_ms']:8.1f} ms  (x{case['ratio']})"
    )
    calls = case.get("calls", {})
    for k in [s for s in STAGES if s in st] + sorted(set(st) - set(STAGES)):
        n = f"  ({calls[k]:g} calls)" if k in calls else ""
        print(f"  {k:28s} {st[k]:8.1f} ms  {100 * st[k] / case['total_ms']:5.1f} %{n}")
    if "stages_sum_over_wall" in case:  # over 1: the model's thread and the writer's overlapped
        print(f"  stages' sum / wall             {case['stages_sum_over_wall']:.2f}")
    print(flush=True)


if __name__ == "__main__":
    main()
