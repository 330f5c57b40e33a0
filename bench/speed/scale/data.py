"""The scale bench's data: orgs and users through the orgs service, items through a bench-only
bulk path (staging table + one INSERT ... SELECT per item type and stage).

Items (episodes 60 %, memories 40 %): item n < `base` carries a real all-MiniLM-L6-v2 embedding
of base text n (bench.speed.filtered_knn's base set: LoCoMo turns + bench.speed.service sentences); every
other item is derived from two random base items a and b and one of 1,000 noise vectors:
embedding l2_normalize(0.75·a + 0.25·b + e), e ~ N(0, 0.01²) per dimension (bench.speed.filtered_knn's
`derive`, computed in SQL so that no vector crosses the socket), text = a's text followed by the
first 8 words of b's. Org sizes: one org of 20 % of the items, ten of 2 % each, the remaining
60 % over the other orgs with log-normal weights (σ 1, at least 20 items each). Users per org:
2,000 in the largest, 200 in each 2 % org, max(3, items/100) in the others; groups per org
max(2, users/40), each user in one or two; user `u0` of every org is in group g0 only and has
no clearance (the measured reader). Items: 50 % private, 35 % group (one group), 15 % org;
5 % labelled `confidential` (10 % of users, never u0, are cleared for it).
"""

from __future__ import annotations

import io
import random
import time
import uuid

import numpy as np
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

TABLES = ("episodes", "memories")
STAGING = "bench_scale_items"


def org_sizes(items: int, orgs: int, seed: int = 1) -> np.ndarray:
    big, mid = round(0.2 * items), round(0.02 * items)
    n_mid = min(10, max(0, orgs - 2))
    rest_orgs = orgs - 1 - n_mid
    rest = items - big - n_mid * mid
    w = np.random.default_rng(seed).lognormal(0, 1, rest_orgs)
    small = np.maximum(20, np.floor(w / w.sum() * rest)).astype(int)
    small[0] += rest - small.sum()  # the rounding remainder (may be negative: keep it small)
    return np.concatenate([[big], np.full(n_mid, mid), small]).astype(int)


def users_per_org(sizes: np.ndarray) -> np.ndarray:
    u = np.maximum(3, sizes // 100)
    u[0] = 2000 if sizes[0] >= 100_000 else max(3, sizes[0] // 100)
    u[1:11] = np.where(sizes[1:11] >= 10_000, 200, u[1:11])
    return u


def create_tenants(settings, sizes: np.ndarray, seed: int = 2) -> dict:
    """Orgs through the service (audited as in production); users COPYed in (bench-only)."""
    from app.kit.database.pg import admin_url
    from app.orgs import service as orgs

    rng = random.Random(seed)
    n_users = users_per_org(sizes)
    eng = create_engine(admin_url(settings))
    org_ids, user_ids, groups_of = [], [], []
    with Session(eng, info={"audit_key": settings.audit_secret()}) as db:
        for i in range(len(sizes)):
            org_ids.append(orgs.create_org(db, f"scale-{i:04d}").id)
        db.commit()
    buf = io.StringIO()
    for _i, (oid, nu) in enumerate(zip(org_ids, n_users)):
        ng = max(2, int(nu) // 40)
        uids, ugroups = [], []
        for j in range(int(nu)):
            uid = uuid.uuid4()
            gs = ["g0"] if j == 0 else sorted({f"g{rng.randrange(ng)}" for _ in range(rng.choice((1, 2)))})
            cl = "{confidential}" if j > 0 and rng.random() < 0.1 else "{}"
            buf.write(f"{uid}\t{oid}\tu{j}\t{{member}}\t{{{','.join(gs)}}}\t{cl}\n")
            uids.append(uid)
            ugroups.append(ng)
        user_ids.append(uids)
        groups_of.append(ng)
    raw = eng.raw_connection()
    try:
        with raw.cursor() as cur, cur.copy("COPY users (id, org_id, name, roles, groups, clearances) FROM STDIN") as cp:
            cp.write(buf.getvalue())
        raw.commit()
    finally:
        raw.close()
    eng.dispose()
    return {"org_ids": org_ids, "user_ids": user_ids, "groups": groups_of}


def stage_items(raw, sizes: np.ndarray, tenants: dict, n_base: int, seed: int = 3) -> None:
    """One staging row per item, in a random interleaving of orgs (the insertion order)."""
    rs = np.random.default_rng(seed)
    org = rs.permutation(np.repeat(np.arange(len(sizes)), sizes))
    n = len(org)
    nu = np.array([len(u) for u in tenants["user_ids"]])
    owner = (rs.random(n) * nu[org]).astype(int)
    vis_r = rs.random(n)
    group = (rs.random(n) * np.array(tenants["groups"])[org]).astype(int)
    conf = rs.random(n) < 0.05
    is_ep = rs.random(n) < 0.6
    a, b, z = rs.integers(0, n_base, n), rs.integers(0, n_base, n), rs.integers(0, 1000, n)
    a[:n_base] = np.arange(min(n, n_base))[: min(n, n_base)]
    cur = raw.cursor()
    cur.execute(f"DROP TABLE IF EXISTS {STAGING}")
    cur.execute(
        f"CREATE UNLOGGED TABLE {STAGING} (n int, type text, id uuid, org_id uuid, owner_id uuid, "
        "visibility text, groups text[], labels text[], a int, b int, z int)"
    )
    oids, uids = tenants["org_ids"], tenants["user_ids"]
    with cur.copy(f"COPY {STAGING} FROM STDIN") as cp:
        buf = io.StringIO()
        for i in range(n):
            o = org[i]
            vis = "private" if vis_r[i] < 0.5 else "group" if vis_r[i] < 0.85 else "org"
            gs = f"{{g{group[i]}}}" if vis == "group" else "{}"
            buf.write(
                f"{i}\t{'episode' if is_ep[i] else 'memory'}\t{uuid.uuid4()}\t{oids[o]}\t{uids[o][owner[i]]}\t"
                f"{vis}\t{gs}\t{'{confidential}' if conf[i] and vis != 'private' else '{}'}\t{a[i]}\t{b[i]}\t{z[i]}\n"
            )
            if i % 50_000 == 49_999:
                cp.write(buf.getvalue())
                buf = io.StringIO()
        cp.write(buf.getvalue())
    cur.execute(f"CREATE INDEX ON {STAGING} (n)")
    raw.commit()


def stage_vectors(raw, texts: list[str], vecs: np.ndarray, seed: int = 11) -> None:
    noise = np.random.default_rng(seed).normal(0, 0.01, (1000, vecs.shape[1])).astype(np.float32)
    cur = raw.cursor()
    cur.execute("DROP TABLE IF EXISTS bench_scale_base; DROP TABLE IF EXISTS bench_scale_noise")
    cur.execute("CREATE UNLOGGED TABLE bench_scale_base (i int PRIMARY KEY, text text, emb vector(384))")
    cur.execute("CREATE UNLOGGED TABLE bench_scale_noise (i int PRIMARY KEY, v vector(384))")
    vec = lambda v: "[" + ",".join(f"{x:.6f}" for x in v) + "]"  # noqa: E731
    with cur.copy("COPY bench_scale_base FROM STDIN") as cp:
        for i, (t, v) in enumerate(zip(texts, vecs)):
            cp.write_row((i, t, vec(v)))
    with cur.copy("COPY bench_scale_noise FROM STDIN") as cp:
        for i, v in enumerate(noise):
            cp.write_row((i, vec(v)))
    raw.commit()


_DERIVED = (
    "CASE WHEN s.n < {base} THEN a.emb ELSE l2_normalize(a.emb * CAST(array_fill(0.75::real, ARRAY[384]) AS vector)"
    " + b.emb * CAST(array_fill(0.25::real, ARRAY[384]) AS vector) + z.v) END"
)
_TEXT = "CASE WHEN s.n < {base} THEN a.text ELSE a.text || ' ' || array_to_string((string_to_array(b.text, ' '))[1:8], ' ') END"
_FROM = (
    f" FROM {STAGING} s JOIN bench_scale_base a ON a.i = s.a JOIN bench_scale_base b ON b.i = s.b"
    " JOIN bench_scale_noise z ON z.i = s.z WHERE s.type = '{type}' AND s.n >= {lo} AND s.n < {hi}"
)
INSERTS = {
    "episodes": "INSERT INTO episodes (org_id, id, owner_id, visibility, groups, labels, kind, content, occurred_at, embedding)"
    " SELECT s.org_id, s.id, s.owner_id, s.visibility, s.groups, s.labels, 'note', "
    + _TEXT
    + ", now() - (s.n % 365) * interval '1 day', "
    + _DERIVED
    + _FROM,
    "memories": "INSERT INTO memories (org_id, id, root_id, owner_id, visibility, groups, labels, kind, text, provenance,"
    " embedding) SELECT s.org_id, s.id, s.id, s.owner_id, s.visibility, s.groups, s.labels, 'fact', "
    + _TEXT
    + ', \'{{"origin": "bench"}}\', '
    + _DERIVED
    + _FROM,
}


def secondary_indexes(cur) -> dict[str, list[tuple[str, str]]]:
    """(name, definition) of every index of the item tables except their primary keys."""
    cur.execute(
        "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
        "AND tablename = ANY(%s) AND indexname NOT LIKE 'pk\\_%%' ORDER BY tablename, indexname",
        (list(TABLES),),
    )
    out: dict = {}
    for t, name, d in cur.fetchall():
        out.setdefault(t, []).append((name, d.replace(" ON ONLY ", " ON ")))  # partitioned: build every partition
    return out


def load_stage(raw, lo: int, hi: int, base: int) -> dict:
    """Items lo <= n < hi: drop the secondary indexes, insert, rebuild them (timed one by one)."""
    cur = raw.cursor()
    defs = secondary_indexes(cur)
    for idx in defs.values():
        for name, _ in idx:
            cur.execute(f"DROP INDEX {name}")
    raw.commit()
    out = {"items": hi - lo, "insert_s": {}, "index_s": {}}
    cur.execute("SET session_replication_role = replica")  # rows are valid by construction: skip per-row FK triggers
    for t in TABLES:
        t0 = time.perf_counter()
        cur.execute(INSERTS[t].format(base=base, lo=lo, hi=hi, type={"episodes": "episode", "memories": "memory"}[t]))
        raw.commit()
        out["insert_s"][t] = round(time.perf_counter() - t0, 1)
    cur.execute("SET session_replication_role = origin")
    t0 = time.perf_counter()
    recount_bm25(cur)
    raw.commit()
    out["bm25_recount_s"] = round(time.perf_counter() - t0, 1)
    cur.execute("SET maintenance_work_mem = '2GB'")
    for t, idx in defs.items():
        for name, d in idx:
            t0 = time.perf_counter()
            cur.execute(d)
            raw.commit()
            out["index_s"][name] = round(time.perf_counter() - t0, 1)
        cur.execute(f"ANALYZE {t}")
        raw.commit()
    print(f"stage {lo}..{hi}: insert {out['insert_s']} s, indexes {out['index_s']} s", flush=True)
    return out


def recount_bm25(cur) -> None:
    """The kept BM25 statistics and postings of the item types this bench loads, recounted from their
    rows by migrations 0024's and 0033's own backfills. The bulk insert runs with
    `session_replication_role = replica`, which also silences the statement triggers that keep them:
    without the recount the service reads N and df of the few rows written over HTTP (a 200k org
    looks like a small one: the one-pass text statement and the exact vector search, with wrong N,
    and no memory found) and its text top n finds only those rows' postings."""
    from bench.speed.scale.layout import BM25, POSTINGS, _migration

    mig = _migration(BM25, "memscale_migration_bm25")
    postings = _migration(POSTINGS, "memscale_migration_postings")
    types = [t for t, (table, _served) in mig.TYPES.items() if table in TABLES]
    for table in ("bm25_buckets", "bm25_df", "bm25_owned"):
        cur.execute(f"DELETE FROM {table} WHERE item_type = ANY(%s)", (types,))
    cur.execute(
        "DELETE FROM bm25_postings p USING bm25_bucket_ids i"
        " WHERE i.org_id = p.org_id AND i.bid = p.bid AND i.item_type = ANY(%s)",
        (types,),
    )
    cur.execute("DELETE FROM bm25_bucket_ids WHERE item_type = ANY(%s)", (types,))
    for t in types:
        for sql in mig._backfill(t, *mig.TYPES[t]) + postings._backfill(t, *mig.TYPES[t]):
            cur.execute(sql)
    for table in ("bm25_buckets", "bm25_df", "bm25_owned", "bm25_bucket_ids", "bm25_postings"):
        cur.execute(f"ANALYZE {table}")


def sizes_report(cur) -> dict:
    """Sizes summed over partitions (pg_partition_tree is the table itself when not partitioned)."""
    out = {}
    tree = "coalesce((SELECT sum({f}(relid)) FROM pg_partition_tree(%s::regclass)), {f}(%s::regclass))"
    for t in TABLES:
        cur.execute(
            f"SELECT {tree.format(f='pg_total_relation_size')}, {tree.format(f='pg_relation_size')}, "
            f"{tree.format(f='pg_indexes_size')}, (SELECT count(*) FROM {t})",
            (t,) * 6,
        )
        total, heap, idx, rows = cur.fetchone()
        cur.execute(
            "SELECT i.indexname, coalesce((SELECT sum(pg_relation_size(relid)) FROM "
            "pg_partition_tree(i.indexname::regclass)), pg_relation_size(i.indexname::regclass)) "
            "FROM pg_indexes i WHERE i.schemaname = 'public' AND i.tablename = %s ORDER BY 2 DESC",
            (t,),
        )
        out[t] = {
            "rows": rows,
            "total_mb": round(total / 2**20),
            "heap_mb": round(heap / 2**20),
            "indexes_mb": round(idx / 2**20),
            "index_mb": {n: round(s / 2**20) for n, s in cur.fetchall()},
        }
    return out


def drop_staging(settings) -> None:
    from app.kit.database.pg import admin_url

    eng = create_engine(admin_url(settings))
    with eng.begin() as c:
        c.execute(text(f"DROP TABLE IF EXISTS {STAGING}, bench_scale_base, bench_scale_noise"))
    eng.dispose()
