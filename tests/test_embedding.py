"""The local embedder gives sentence-transformers' own vectors (real all-MiniLM-L6-v2), on ONNX
Runtime (the default) and on eager torch, and refuses an exported model that does not."""

from __future__ import annotations

import numpy as np
import pytest

LONG = "the kiln log of the glaze firing, cone six, held for twenty minutes; " * 40  # > 256 tokens: truncated
TEXTS = [
    "When did Caroline go to the LGBTQ support group?",
    "",
    "a",
    LONG,
    "Pottery class on Sunday.",
    "Melanie painted a lake sunrise in 2022 and showed it at the local gallery.",
    "a",
]


def _equals_encode(embedder) -> None:
    got = embedder.embed(TEXTS)
    ref = embedder._model.encode(TEXTS, batch_size=3, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    assert got.shape == (len(TEXTS), 384) and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, atol=2e-6)
    # the order of the input is the order of the output, whatever the length-sorted batching did
    np.testing.assert_array_equal(got[2], got[6])
    np.testing.assert_allclose(embedder.embed([TEXTS[4]])[0], got[4], atol=2e-6)  # one query: one thread
    many = [f"turn {i}: {TEXTS[i % len(TEXTS)]}" for i in range(40)]  # several batches, the many-thread path
    np.testing.assert_allclose(
        embedder.embed(many),
        embedder._model.encode(many, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False),
        atol=2e-6,
    )
    assert embedder.embed([]).shape == (0, 384)


def test_onnx_encoder_equals_sentence_transformers_encode(embedder):
    assert embedder._direct  # the bundled model has the shape the direct path runs
    assert embedder.backend == "onnx"  # the export and its check succeeded: the fast path is in use
    _equals_encode(embedder)


@pytest.fixture(scope="module")
def torch_embedder():
    from app.kit.runtime.embedding import LocalEmbedder

    return LocalEmbedder(backend="torch")


def test_torch_backend_equals_sentence_transformers_encode(torch_embedder):
    assert torch_embedder.backend == "torch" and torch_embedder._onnx is None
    _equals_encode(torch_embedder)


def test_a_tampered_export_is_refused_and_torch_serves(tmp_path, embedder, torch_embedder):
    """A cached export whose weights were changed fails the check at load: the embedder runs on
    torch (same vectors) and the file is removed, to be exported afresh at the next start."""
    import os
    import shutil
    from pathlib import Path

    import onnx
    from onnx import numpy_helper

    from app.kit.runtime.embedding import OnnxEncoder

    (session_export,) = Path(os.environ["MEMSCALE_MODEL_CACHE_DIR"]).glob("minilm-*.onnx")  # the session's
    path = tmp_path / session_export.name
    shutil.copy(session_export, path)
    assert OnnxEncoder.load(torch_embedder, tmp_path) is not None  # the intact copy loads and checks
    model = onnx.load(str(path))
    init = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))  # the largest weight
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 1.01, init.name))
    onnx.save(model, str(path))
    assert OnnxEncoder.load(torch_embedder, tmp_path) is None
    assert not path.exists()


def test_prune_removes_stale_exports_of_other_keys_only(tmp_path):
    """The cache keeps one export per key; another key's export unused for 30 days and a dead
    write's temporary file go, the export in use (and any recently loaded one) stays."""
    import os
    import time

    from app.kit.runtime.embedding import OnnxEncoder

    now = time.time()
    ages = {
        "minilm-aaa.onnx": 40,
        "minilm-old.onnx": 31,
        "minilm-recent.onnx": 29,
        "minilm-aaa.123.tmp": 2,
        "minilm-bbb.456.tmp": 0.5,
        "notes.txt": 400,
    }  # days
    for name, days in ages.items():
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, (now - days * 86400,) * 2)
    gone = OnnxEncoder.prune(tmp_path, keep=tmp_path / "minilm-aaa.onnx", now=now)
    assert sorted(p.name for p in gone) == ["minilm-aaa.123.tmp", "minilm-old.onnx"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "minilm-aaa.onnx",
        "minilm-bbb.456.tmp",
        "minilm-recent.onnx",
        "notes.txt",
    ]
