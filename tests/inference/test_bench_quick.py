"""The inference benchmarks' quick modes end to end on the real model (smoke runs; results under a
temporary folder). The quality benchmark's metrics are also checked for what they must mean."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_inference_quality_quick(tmp_path):
    from bench.quality.inference_quality.__main__ import main

    s = main(["--quick", "--out", str(tmp_path)])
    (line1, line2) = (tmp_path / "inference_quality_quick.jsonl").read_text().splitlines()
    recs = [json.loads(line1), json.loads(line2)]
    assert {r["corpus"] for r in recs} == {"wiki", "locomo"}  # one example of each corpus
    for r in recs:
        full, blend = r["runs"]["full"], r["runs"]["default"]
        assert full["kl"] == 0.0 and blend["kl"] > 0.0  # KL against full prefill, over the answer tokens
        assert full["ll"] < 0 and blend["ll"] < 0  # mean log-prob per gold answer token
        assert full["recomputed"] == r["chunk_tokens"] > blend["recomputed"] > 0
        assert 0.0 <= full["f1"] <= 1.0 and isinstance(full["text"], str)
    d = s["all"]["default"]
    assert d["n"] == 2 and d["delta_ll"]["n"] == 2 and d["speedup_median"] > 1.0
