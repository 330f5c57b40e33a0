"""Synthetic items written by SQL, fast enough to grow one org to 200k rows on two cores.

Vectors: 384-dim unit vectors with cluster structure, each `l2_normalize(center + sub + noise)`
of three banks of random vectors of one 24-dimensional subspace (251 centres of norm 1, 1,021 sub-centres of norm 0.6, 1,019
noise vectors of norm 0.35) picked by multiplicative hashes of the row number: neighbourhoods
exist (rows of one centre and sub-centre), unlike plain random vectors where kNN recall is
meaningless. Text: ten words of a 5,000-word vocabulary, six of the row's centre's own 40 words
and four of a Zipf-like draw over the whole vocabulary, so that text and vector agree about as
much as a topic does. Queries are drawn the same way from row numbers past the data.

Visibility mix, by row number (the same share at every size): 50 % private (owned by one of the
org's users), 35 % group (one of its groups), 15 % org, as bench/speed/scale lays out its orgs.
"""

from __future__ import annotations

import uuid

import numpy as np

DIM = 384
RANK = 24  # intrinsic dimension: real sentence embeddings have few; full-rank noise makes every neighbour a near tie
WORDS = 5000
BANKS = {"bench_synth_center": (251, 1.0), "bench_synth_sub": (1021, 0.6), "bench_synth_noise": (1019, 0.35)}
# hashes of the row number g into banks of prime sizes: every (center, sub, noise) triple differs
# for g below 251 * 1021 * 1019 (a power-of-two size would repeat with g's low bits)
_PICK = "(({g} * 7919) % 251)", "(({g} * 104729 + 7) % 1021)", "(({g} * 15485863 + 3) % 1019)"
VIS = "CASE WHEN {g} % 20 < 10 THEN 'private' WHEN {g} % 20 < 17 THEN 'group' ELSE 'org' END"


def setup(raw, seed: int = 5) -> None:
    """The vector banks and the vocabulary, once per database."""
    rs = np.random.default_rng(seed)
    basis = np.linalg.qr(rs.normal(0, 1, (DIM, RANK)))[0].T  # the RANK-dim subspace every vector lies in
    cur = raw.cursor()
    for t, (n, norm) in BANKS.items():
        v = rs.normal(0, 1, (n, RANK)) @ basis
        v = norm * v / np.linalg.norm(v, axis=1, keepdims=True)
        cur.execute(f"DROP TABLE IF EXISTS {t}")
        cur.execute(f"CREATE UNLOGGED TABLE {t} (i int PRIMARY KEY, v vector({DIM}))")
        with cur.copy(f"COPY {t} FROM STDIN") as cp:
            for i, x in enumerate(v):
                cp.write_row((i, "[" + ",".join(f"{y:.5f}" for y in x) + "]"))
    cur.execute("DROP TABLE IF EXISTS bench_synth_words")
    cur.execute("CREATE UNLOGGED TABLE bench_synth_words (i int PRIMARY KEY, w text)")
    syl = ["ka", "lo", "mi", "ren", "sut", "vo", "dra", "pel", "qui", "zan", "tor", "bex", "nim", "ghu", "fal", "wes"]
    words = sorted({"".join(syl[j] for j in rs.integers(0, len(syl), 3)) + str(i % 7) for i in range(WORDS * 2)})[:WORDS]
    with cur.copy("COPY bench_synth_words FROM STDIN") as cp:
        for i, w in enumerate(words):
            cp.write_row((i, w))
    raw.commit()


def vector_sql(g: str) -> str:
    """The SQL expression of row `g`'s vector (the banks joined as c, s, z)."""
    return "l2_normalize(c.v + s.v + z.v)"


def text_sql(g: str) -> str:
    """Ten words: six of the row's centre's 40, four over the whole vocabulary (cubed uniform: Zipf-like)."""
    own = (
        f"(SELECT string_agg(w.w, ' ') FROM generate_series(1, 6) j JOIN bench_synth_words w ON w.i = "
        f"(({_PICK[0].format(g=g)} * 40 + (({g} * 31 + j * 17) % 40)) % {WORDS}))"
    )
    common = (
        f"(SELECT string_agg(w.w, ' ') FROM generate_series(1, 4) j JOIN bench_synth_words w ON w.i = "
        f"floor(power(((({g} * 7919 + j * 104729) % 10007) / 10007.0), 3) * {WORDS})::int)"
    )
    return f"{own} || ' ' || {common}"


def _from(g: str) -> str:
    return (
        f" JOIN bench_synth_center c ON c.i = {_PICK[0].format(g=g)} JOIN bench_synth_sub s ON s.i = {_PICK[1].format(g=g)}"
        f" JOIN bench_synth_noise z ON z.i = {_PICK[2].format(g=g)}"
    )


def _acl(g: str, users: str, n_groups: int) -> str:
    vis = VIS.format(g=g)
    return (
        f"({users})[1 + ({g} / 20 * 7 + {g}) % cardinality({users})], {vis},"
        f" CASE WHEN {vis} = 'group' THEN ARRAY['g' || (({g} / 20) % {n_groups})] ELSE '{{}}'::text[] END"
    )


INSERTS = {
    "memory": "INSERT INTO memories (org_id, id, root_id, owner_id, visibility, groups, kind, text, provenance, embedding)"
    " SELECT CAST(:org AS uuid), u.id, u.id, {acl}, 'fact', {text}, '{{\"origin\": \"bench\"}}', {vec}",
    "episode": "INSERT INTO episodes (org_id, id, owner_id, visibility, groups, kind, content, occurred_at, embedding)"
    " SELECT CAST(:org AS uuid), u.id, {acl}, 'note', {text}, now() - ({g} % 365) * interval '1 day', {vec}",
    "chunk": "INSERT INTO chunks (org_id, id, asset_id, owner_id, visibility, groups, ord, text, content_hash, token_count,"
    " embedding)"
    " SELECT CAST(:org AS uuid), u.id, CAST(:asset AS uuid), {acl}, {g}, {text}, md5({g}::text), 12, {vec}",
}


def insert_sql(type_: str, n_groups: int) -> str:
    """Rows lo <= g < hi of one type for org :org (users :users, the chunks' asset :asset); ids
    derived from (org, type, g) so that a row is the same at every size."""
    g = "(g.g::bigint)"
    body = INSERTS[type_].format(acl=_acl(g, "CAST(:users AS uuid[])", n_groups), text=text_sql(g), vec=vector_sql(g), g=g)
    return (
        body + " FROM generate_series(:lo, :hi - 1) g(g)"
        f" CROSS JOIN LATERAL (SELECT md5(CAST(:org AS text) || '{type_}' || g.g)::uuid id) u" + _from(g)
    )


def query_vectors(raw, n: int, start: int = 10_000_000) -> list[tuple[str, list[float]]]:
    """`n` (text, vector) queries drawn like rows numbered from `start` (past any data)."""
    g = "(g.g::bigint)"
    cur = raw.cursor()
    sql = f"SELECT {text_sql(g)}, ({vector_sql(g)})::text FROM generate_series(:lo, :hi) g(g)" + _from(g)
    cur.execute(sql.replace("%", "%%").replace(":lo", "%s").replace(":hi", "%s"), (start, start + n - 1))
    return [
        (t.split(" ")[0] + " " + t.split(" ")[1] + " " + t.split(" ")[-1], [float(x) for x in v.strip("[]").split(",")])
        for t, v in cur.fetchall()
    ]


def grow(
    raw,
    org_id: uuid.UUID,
    users: list,
    asset_id: uuid.UUID | None,
    n_groups: int,
    type_: str,
    lo: int,
    hi: int,
    step: int = 20_000,
) -> None:
    """Rows lo..hi-1 of one type, committed in steps (each a separate transaction)."""
    cur = raw.cursor()
    sql = (
        insert_sql(type_, n_groups)
        .replace("%", "%%")
        .replace(":org", "%(org)s")
        .replace(":users", "%(users)s")
        .replace(":asset", "%(asset)s")
        .replace(":lo", "%(lo)s")
        .replace(":hi", "%(hi)s")
    )
    for a in range(lo, hi, step):
        cur.execute(
            sql,
            {
                "org": str(org_id),
                "users": [str(u) for u in users],
                "asset": str(asset_id) if asset_id else None,
                "lo": a,
                "hi": min(hi, a + step),
            },
        )
        raw.commit()
