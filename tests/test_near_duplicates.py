"""Near-duplicate decisions (distillation's dedupe, consolidation's merge) and their thresholds in one module."""

from __future__ import annotations

import numpy as np

from app.jobs.params import ConsolidateParams
from app.memories import near_duplicates as nd


def test_consolidation_defaults_are_the_modules_thresholds():
    p = ConsolidateParams()
    assert (p.duplicate_threshold, p.conflict_threshold) == (nd.DUPLICATE_SIMILARITY, nd.CONFLICT_SIMILARITY)
    assert nd.CONFLICT_SIMILARITY < nd.NEAR_SIMILARITY < nd.DUPLICATE_SIMILARITY


def test_a_stored_memory_is_repeated_by_its_vector_its_text_or_its_statement():
    old, new = "Invoices are due within 30 days of delivery.", "Invoices are due within 30 days, of delivery"
    assert nd.repeats_stored("Anything at all.", 0.08, "Something else entirely.")  # similarity 0.92
    assert not nd.repeats_stored("Anything at all.", 0.09, "Something else entirely.")
    assert nd.repeats_stored(" Same Words. ", 0.9, "same words.")  # far vectors, same text
    assert nd.repeats_stored(old, 0.2, new)  # close enough, the same statement
    assert not nd.repeats_stored(old, 0.21, new)
    assert not nd.repeats_stored(old, 0.1, "Invoices are due within 45 days of delivery.")  # another value


def test_within_a_batch_a_near_wording_needs_a_shared_source():
    a, b = "Invoices for ACME go out on the 5th as PDF.", "Invoices for ACME always go out on the 5th as PDF files."
    assert nd.near_wording(a, b) and not nd.same_words(a, b)
    assert nd.repeats_in_batch(a, b, shared_source=True)
    assert not nd.repeats_in_batch(a, b, shared_source=False)
    assert nd.repeats_in_batch("PDF invoices for ACME.", "for ACME: invoices, PDF", shared_source=False)
    assert not nd.near_wording(a, a.replace("5th", "6th"))  # values must match exactly


def test_clusters_are_connected_components_at_the_threshold():
    def unit(v: list[float]) -> np.ndarray:
        x = np.asarray(v, dtype=np.float32)
        return x / np.linalg.norm(x)

    vecs = [unit([1, 0, 0]), unit([1, 0.2, 0]), unit([1, 0.45, 0]), unit([0, 0, 1])]
    assert nd.clusters(vecs, 0.95) == [[0, 1, 2]]  # 0~1 and 1~2 chain though 0 and 2 are further apart
    assert nd.clusters(vecs, 0.999) == []
    assert nd.clusters(vecs[:1], 0.5) == []
