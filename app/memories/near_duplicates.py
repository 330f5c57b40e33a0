"""When two memories say the same thing: every near-duplicate decision and its thresholds.

Distillation asks whether a statement repeats one found earlier in the same batch
(:func:`repeats_in_batch`) or the nearest active memory of its scope (:func:`repeats_stored`);
consolidation groups a scope's memories by vector similarity (:func:`clusters`), at
:data:`DUPLICATE_SIMILARITY` to merge them and at :data:`CONFLICT_SIMILARITY` to look for
contradictions. The consolidate job's parameters (app/jobs/params.py) take their defaults from
here, which is why this module lives in the app rather than in pipelines/ (the app never imports
pipelines). Vectors are unit length, so cosine similarity is ``1 - cosine distance``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.llm.guard import content_words, values, words

DUPLICATE_SIMILARITY = 0.92  # at or above: two memories say the same thing, whatever their words
NEAR_SIMILARITY = 0.8  # at or above: the same statement by its words (:func:`same_statement`) is a repeat too
CONFLICT_SIMILARITY = 0.75  # at or above: the same subject, so two memories may contradict each other
WORD_OVERLAP = 0.6  # share of content words (of both together) two wordings need to be the same statement


def same_words(a: str, b: str) -> bool:
    """The same set of words, whatever their order and case."""
    return set(words(a)) == set(words(b))


def near_wording(a: str, b: str) -> bool:
    """Mostly the same content words (:data:`WORD_OVERLAP`) with exactly the same key values
    (``guard.values``), so "due within 30 days" and "due within 45 days" stay apart."""
    ca, cb = content_words(a), content_words(b)
    return bool(ca and cb) and len(ca & cb) / len(ca | cb) >= WORD_OVERLAP and values(a) == values(b)


def same_statement(a: str, b: str) -> bool:
    """The same words, or mostly the same content words with exactly the same values."""
    return same_words(a, b) or near_wording(a, b)


def repeats_in_batch(earlier: str, later: str, *, shared_source: bool) -> bool:
    """Within one extraction batch: the same words, or a near wording drawn from a shared source."""
    return same_words(earlier, later) or (shared_source and near_wording(earlier, later))


def repeats_stored(stored: str, distance: float, new: str) -> bool:
    """A new statement repeats the nearest stored memory of its scope (``distance``: their cosine
    distance): the vectors are near-identical, the text is the same, or they are close and the
    wording is the same statement."""
    similarity = 1.0 - distance
    return (
        similarity >= DUPLICATE_SIMILARITY
        or stored.strip().lower() == new.strip().lower()
        or (similarity >= NEAR_SIMILARITY and same_statement(stored, new))
    )


def clusters(vectors: Sequence[np.ndarray], threshold: float) -> list[list[int]]:
    """Connected components (as index lists, singletons left out) of cosine similarity >= threshold."""
    if len(vectors) < 2:
        return []
    m = np.stack(vectors)
    sim = m @ m.T
    parent = list(range(len(vectors)))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a, b in zip(*np.nonzero(np.triu(sim >= threshold, k=1))):
        parent[find(int(a))] = find(int(b))
    groups: dict[int, list[int]] = {}
    for i in range(len(vectors)):
        groups.setdefault(find(i), []).append(i)
    return [g for g in groups.values() if len(g) > 1]
