"""The local embedder's direct path gives sentence-transformers' own vectors (real all-MiniLM-L6-v2)."""

from __future__ import annotations

import numpy as np


def test_direct_forward_equals_sentence_transformers_encode(embedder):
    assert embedder._direct  # the bundled model has the shape the direct path runs
    long = "the kiln log of the glaze firing, cone six, held for twenty minutes; " * 40  # > 256 tokens: truncated
    texts = ["When did Caroline go to the LGBTQ support group?", "", "a", long, "Pottery class on Sunday.",
             "Melanie painted a lake sunrise in 2022 and showed it at the local gallery.", "a"]
    got = embedder.embed(texts)
    ref = embedder._model.encode(texts, batch_size=3, normalize_embeddings=True, convert_to_numpy=True,
                                 show_progress_bar=False)
    assert got.shape == (len(texts), 384) and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, atol=2e-6)
    # the order of the input is the order of the output, whatever the length-sorted batching did
    np.testing.assert_array_equal(got[2], got[6])
    np.testing.assert_allclose(embedder.embed([texts[4]])[0], got[4], atol=2e-6)
    assert embedder.embed([]).shape == (0, 384)
