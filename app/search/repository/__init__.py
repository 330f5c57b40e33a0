"""The search path's SQL, one module per concern: `filters` (what a caller may be served, the
statement cache), `vector` (kNN and the fusion pool's rows), `bm25` (ranked text), `rows` (loading
results, a turn's neighbours), `lexicon` (the org's vocabulary and the vocabulary lift), `window`
(the rows of a named time), `expansion` (the second round's query). The names below are the ones
callers outside the package use."""

from app.search.repository.bm25 import query_lexemes, text_ids, text_scored, visible_count
from app.search.repository.rows import load, neighbour_ids
from app.search.repository.vector import AUTO_SCAN_TUPLES, MAX_SCAN_TUPLES, SCAN_MODES, exact_pool, pool_rows, vector_ids

__all__ = [
    "AUTO_SCAN_TUPLES",
    "MAX_SCAN_TUPLES",
    "SCAN_MODES",
    "exact_pool",
    "load",
    "neighbour_ids",
    "pool_rows",
    "query_lexemes",
    "text_ids",
    "text_scored",
    "vector_ids",
    "visible_count",
]
