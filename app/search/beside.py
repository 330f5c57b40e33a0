"""The turns beside the best (conversation turns): after the fusion, the turns just before and
after each of the `Tuning.beside_from` best fused turns join the pool, and a second fusion over
the larger pool scores them; the rows already pooled keep the scores they had.

Evidence a question shares nothing with is often the turn next to one it does match: the answer
after a question, the detail after a greeting ("I'm off to go swimming with the kids"). The
neighbours come from the pairs the ranking already looked up (repository/rows.py: the caller's
servable turns of the same session), their rows under the call's filters, so another user's or
org's turn never joins. The pooled rows keep their first scores because the second fusion's
statistics (z-scores over a larger pool, new neighbour pairs) would reorder them for no reason of
theirs. Off by default (`beside_from` 0): its figures through the service are in docs/search.md
(multi-hop)."""

from __future__ import annotations

from dataclasses import replace

from app.search.repository.speakers import speakers
from app.search.repository.vector import pool_rows
from app.search.signals import Pool, fuse, spoken_by_named


def beside_best(db, call, pool: Pool, fused: dict, parts: dict | None, info: dict) -> tuple[dict, dict | None]:
    """(fused, parts) with the joined turns' scores added (`call`: service.RankCall)."""
    seeds = set(sorted(fused, key=lambda i: (-fused[i], str(i)))[: call.tuning.beside_from])
    near = list(dict.fromkeys(n for n, h in pool.pairs if h in seeds and n not in fused))
    found = pool_rows(db, call.principal, "episode", call.qvec.get(), near, call.filters) if near else []
    info["beside"] = len(found)
    if not found:
        return fused, parts
    joined = {r.id for r in found}
    lifts = dict(pool.lifts)
    if "speaker" in lifts:  # the joined turns of a speaker the query names
        who = speakers(db, call.principal, call.filters, list(joined))
        lifts["speaker"] = {**lifts["speaker"], **spoken_by_named(call.query, who)}
    pairs = pool.pairs + [(h, n) for n, h in pool.pairs if n in joined]
    again, why = fuse(
        replace(pool, rows=pool.rows + list(found), lifts=lifts, pairs=pairs), call.tuning, explain=parts is not None
    )
    fused = {**fused, **{i: again[i] for i in joined}}
    return fused, None if parts is None else {**parts, **{i: why[i] for i in joined}}
