"""The hybrid ranking's settings (`Tuning`): a frozen value passed to the ranking with each call.

The app holds one (`app.state.tuning`, the defaults); a benchmark that compares settings builds
its own with `dataclasses.replace(DEFAULT_TUNING, ...)` and hands it to the app or to `rank`.
Each weight belongs to one signal of app/search/signals.py (`SIGNALS`); 0 turns that signal off.
How the defaults were chosen (LoCoMo dev, leave-one-conversation-out): docs/search.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    fusion: str = "zscore"  # "zscore" (score fusion) | "rrf" (reciprocal-rank fusion, kept for ablations)
    pool: int | None = 100  # candidates per retriever and type, independent of k
    # (None: the k-dependent depths, vector max(2k, 20) and text max(2k, 50); with "rrf" only)
    w_vector: float = 1.0  # weight of the z-normalised cosine against the z-normalised BM25
    neighbour: float = 0.5  # share of the best adjacent turn's fused score a turn gains
    session: float = 0.5  # share of its session's best score a turn gains
    expand_from: int = 5  # second round (conversation turns): seeded by this many best first-round turns
    expand_terms: int = 10  # ... using their rarest words not in the query (0: no second round)
    expand_weight: float = 0.3  # weight of the second round's z-normalised BM25
    expand_depth: int = 30  # rows the second round may add to the pool
    # The vocabulary lift (conversation turns; app/search/lexicon.py): the `vocab_terms` words of the
    # caller's rows nearest to the query (cosine > vocab_min_sim) score rows like BM25 terms; the
    # positive part of that z-score adds with `vocab_weight`; its `vocab_depth` best rows join the pool.
    # Candidate words: those of the pooled rows (app/search/repository/lexicon.py). vocab_terms 0: off.
    vocab_terms: int = 5
    vocab_min_sim: float = 0.3
    vocab_weight: float = 0.5
    vocab_depth: int = 30
    # A turn gains length_prior x (ln(1 + its lexemes) - their mean over the pool): a one-word
    # "Yeah!" answers less often than a turn that says something. 0: off.
    length_prior: float = 0.3
    # A query that names a time (instruction.query_window): the `time_depth` nearest of the caller's turns
    # of that time join the pool; w x the positive part of the z-score of being inside the window adds (a
    # named day lifts far more than a named year that covers the pool). 0: off.
    time_weight: float = 1.0
    time_depth: int = 30
    # A query that names a speaker of the caller's conversation turns ("Caroline: ..."): w x the positive
    # part of the z-score of being that speaker's turn adds (signals.spoken_by_named; the pool's turns
    # only, no rows join). 0: off.
    speaker_weight: float = 8.0
    # The final score is logistic(fused / squash_scale): a scale above 1 keeps the best results of a
    # pool apart in (0, 1) (fused scores of 12-20 z-units all squash to ~1.0 at scale 1, and context
    # assembly would then order them by recency alone).
    squash_scale: float = 3.0
    # Feedback (app/feedback/service.py): a memory with feedback gains utility_weight x ln(estimate / 0.5),
    # the estimate floored at 0.1 (signals.utility); one user moves it by at most 1/6. 0: off.
    utility_weight: float = 2.0
    # Hybrid: the caller's visible rows of a type are counted once (BM25's N); up to this many,
    # the vector pool is the exact search (cheaper and exact there); 0: HNSW first always. Measured
    # (docs/search.md): exact wins at 2.5k and 5.5k visible, the walk at 8k (10 vs 34 ms, recall@10 1.0).
    exact_below: int = 6_000


DEFAULT_TUNING = Tuning()
