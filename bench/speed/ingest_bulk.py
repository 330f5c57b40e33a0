"""`memscale admin import` beside the bare model, and the two ways of staging a bulk write's rows
(the ingest profile's --bulk and --staging; see bench/speed/ingest_profile.py)."""

from __future__ import annotations

import statistics
import time

from bench.speed.ingest_profile import Harness, _print


def _alone_sliced(embedder, texts: list[str]) -> float:
    """The bare model on `texts` as the import slices them (longest first, EMBED_CHUNK a call):
    the least time the model needs for them."""
    from app.episodes.bulk import EMBED_CHUNK
    from app.episodes.feed import item_slices

    t0 = time.perf_counter()
    for _ in item_slices(embedder, None, texts, EMBED_CHUNK):
        pass
    return time.perf_counter() - t0


def bulk_pairs(h: Harness, bare, turns: list[str], n: int, pairs: int) -> list[dict]:
    """`pairs` interleaved runs of (the embedder alone, `memscale admin import`) on the same `n`
    turns, each import into a new org; per pair the ratio of wall times, and the import's stages
    (the embedding thread's and the writer's: their sum over the wall says how much overlapped)."""
    from app.kit.stages import Stages
    from bench.common import load_average

    texts = [turns[i % len(turns)] + ("" if i < len(turns) else f" ({i // len(turns)})") for i in range(n)]
    cases = []
    for k in range(pairs):
        load = load_average()
        alone = _alone_sliced(bare, texts)
        rec = Stages()
        wall = h.bulk_import(h.principal(f"import{n}_{k}"), texts, rec)
        case = {
            "org": 0,
            "batch": n,
            "repeats": 1,
            "import": True,
            "pair": k + 1,
            "load": load,
            "total_ms": round(1000 * wall, 1),
            "embedder_alone_ms": round(1000 * alone, 1),
            "stages_ms": {key: round(1000 * v, 1) for key, v in rec.seconds.items()},
        }
        case["ratio"] = round(case["total_ms"] / case["embedder_alone_ms"], 3)
        case["stages_sum_over_wall"] = round(sum(rec.seconds.values()) / wall, 2)
        cases.append(case)
        _print(case)
    return cases


def staging(h: Harness, turns: list[str], sizes: list[int], rounds: int = 3) -> list[dict]:
    """Median ms of writing `n` chunks of one asset both ways (app/knowledge/repository.py
    `insert_chunks`, `copy_chunks`), interleaved; vectors random, texts LoCoMo turns."""
    import uuid

    import numpy as np

    from app.kit.database.base import EMBEDDING_DIM
    from app.kit.database.db import bind_principal
    from app.kit.text import sha256
    from app.knowledge import repository as krepo
    from app.knowledge.models import KnowledgeAsset

    p, out = h.principal("staging"), []
    rng = np.random.default_rng(0)
    for n in sizes:
        times: dict[str, list[float]] = {"unnest": [], "copy": []}
        for _ in range(rounds):
            for way, write in (("unnest", krepo.insert_chunks), ("copy", krepo.copy_chunks)):
                with h.state.sessions() as db:
                    bind_principal(db, p)
                    a = KnowledgeAsset(
                        id=uuid.uuid4(), org_id=p.org_id, owner_id=p.user_id, kind="document", source_uri=f"bench:{uuid.uuid4()}",
                        title="", content_hash="x", metadata_={}, visibility="org", groups=[], labels=[],
                    )  # fmt: skip
                    db.add(a)
                    db.flush()
                    rows = [
                        dict(id=uuid.uuid4(), ord=i, text=(t := turns[i % len(turns)]), content_hash=sha256(t), token_count=9,
                             embedding=rng.standard_normal(EMBEDDING_DIM).astype(np.float32))
                        for i in range(n)
                    ]  # fmt: skip
                    t0 = time.perf_counter()
                    write(db, a, rows, branch=None)
                    db.flush()
                    times[way].append(time.perf_counter() - t0)
                    db.rollback()
        case = {"chunks": n, **{k: round(1000 * statistics.median(v), 1) for k, v in times.items()}}
        print(f"{n:6d} chunks: unnest {case['unnest']:8.1f} ms, COPY via staging {case['copy']:8.1f} ms", flush=True)
        out.append(case)
    return out
