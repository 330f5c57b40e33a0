"""Retrieval changes proposed for app/, measured in-process against the unchanged service.

`apply(name)` patches the named change into the running process and returns a function that
undoes it; the benches then call the real endpoints. Nothing here edits app/: each proposal is
written so that it can be pasted into the named app function as is.

- ``idf_text``: `app.search.repository.text_ids` today ranks with `websearch_to_tsquery` (every
  term must match, so a natural-language question rarely matches any single turn and hybrid
  search is vector-only in practice) and `ts_rank_cd` (no term rarity). Proposed: match ANY
  query lexeme and rank by the sum of the matched lexemes' IDF over the caller's visible rows
  (BM25 with binary term frequency), so rare words ("pottery", "Sweden") outweigh names and
  common verbs. Hybrid RRF is unchanged.
- ``skip_quarantined``: `app.search.repository._filters` also serves episodes the distillation
  judge quarantined (prompt injections). Proposed: exclude ``quality = 'quarantined'`` episodes
  from search and context, as memories with status ``quarantined`` already are.
"""

from __future__ import annotations

import math
from collections.abc import Callable


def idf_text_ids(db, principal, type_: str, query: str, f, n: int) -> list[tuple]:  # noqa: ANN001
    """Drop-in for app.search.repository.text_ids: OR over the query's lexemes, IDF-weighted."""
    from sqlalchemy import case, func, select

    from app.search import repository as repo

    m = repo.SPECS[type_].model
    conds = repo._filters(principal, type_, f)
    lexemes = db.execute(select(func.unnest(func.tsvector_to_array(func.to_tsvector("english", query))))).scalars().all()
    if not lexemes:
        return []
    terms = [func.to_tsquery("simple", "'" + w.replace("'", "''") + "'") for w in lexemes]
    counts = db.execute(select(func.count(), *[func.count().filter(m.tsv.op("@@")(t)) for t in terms])
                        .select_from(m).where(*conds)).one()
    total, dfs = counts[0], counts[1:]
    idf = [math.log(1 + (total - d + 0.5) / (d + 0.5)) for d in dfs]
    any_term = func.to_tsquery("simple", " | ".join("'" + w.replace("'", "''") + "'" for w in lexemes))
    score = sum((case((m.tsv.op("@@")(t), w), else_=0.0) for t, w in zip(terms, idf)), start=0.0)
    return db.execute(select(m.id, score.label("r")).where(*conds, m.tsv.op("@@")(any_term))
                      .order_by(score.desc(), m.id).limit(n)).all()


def _patch_idf_text() -> Callable[[], None]:
    from app.search import repository as repo

    original = repo.text_ids
    repo.text_ids = idf_text_ids
    return lambda: setattr(repo, "text_ids", original)


def _patch_skip_quarantined() -> Callable[[], None]:
    from app.search import repository as repo

    original = repo._filters

    def filters(principal, type_: str, f) -> list:  # noqa: ANN001
        conds = original(principal, type_, f)
        if type_ == "episode":
            conds.append(repo.Episode.quality.is_distinct_from("quarantined"))
        return conds

    repo._filters = filters
    return lambda: setattr(repo, "_filters", original)


PROPOSALS: dict[str, Callable[[], Callable[[], None]]] = {
    "idf_text": _patch_idf_text,
    "skip_quarantined": _patch_skip_quarantined,
}


def apply(name: str) -> Callable[[], None]:
    """Patch in one or more proposals (comma-separated); returns the undo."""
    if name in ("", "none"):
        return lambda: None
    undos = []
    for part in name.split(","):
        if part not in PROPOSALS:
            raise SystemExit(f"unknown proposal {part!r}; known: none, {', '.join(PROPOSALS)}")
        undos.append(PROPOSALS[part]())

    def undo() -> None:
        for u in reversed(undos):
            u()

    return undo
