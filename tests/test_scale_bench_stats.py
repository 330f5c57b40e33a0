"""bench/speed/scale's bulk load inserts with triggers off (`session_replication_role = replica`):
it must leave the kept BM25 statistics equal to a recount of what it loaded, else the service
ranks its orgs with the N and df of the few rows written over HTTP."""

from __future__ import annotations

import numpy as np
from sqlalchemy import create_engine, text

from tests.test_bm25_stats import _kept_equals_recount

DB = "memscale_test_scale_bench_stats"


def test_the_bulk_load_leaves_the_kept_bm25_statistics_equal_to_a_recount(settings):
    from app.kit.database.pg import admin_url
    from bench.common import _server, fresh_database
    from bench.speed.scale import data

    s = fresh_database(DB)
    try:
        sizes = np.array([40, 20, 20])
        tenants = data.create_tenants(s, sizes)
        texts = [
            f"caroline went {w} with melanie on a sunny {d}" for w in ("hiking", "camping", "pottery") for d in ("day", "week")
        ]
        vecs = np.random.default_rng(0).normal(size=(len(texts), 384)).astype(np.float32)
        eng = create_engine(admin_url(s))
        raw = eng.raw_connection()
        try:
            data.stage_vectors(raw, texts, vecs)
            data.stage_items(raw, sizes, tenants, len(texts))
            data.load_stage(raw, 0, 30, len(texts))
            data.load_stage(raw, 30, int(sizes.sum()), len(texts))
        finally:
            raw.close()
        with eng.connect() as c:
            assert c.execute(text("SELECT count(*) FROM memories")).scalar() + c.execute(
                text("SELECT count(*) FROM episodes")
            ).scalar() == int(sizes.sum())
            for org in tenants["org_ids"]:
                assert c.execute(text("SELECT sum(n) FROM bm25_buckets WHERE org_id = :o"), {"o": org}).scalar() > 0
                _kept_equals_recount(c, org)
        eng.dispose()
    finally:
        with _server().connect() as c:
            c.execute(text(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"))
