"""`memscale bench locomo` ablation and per-conversation merge, on the quick slice."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_locomo_quick_ablation_and_merge(settings, embedder, tmp_path):
    from bench.quality.locomo.__main__ import DEFAULT_VARIANT, main
    from bench.tools.locomo_merge import main as merge

    r = main(
        [
            "--quick",
            "--reader-questions",
            "0",
            "--ablate",
            "before: rrf at k-dependent depth,score fusion",
            "--only",
            "conv-26",
            "--name",
            "part",
            "--out",
            str(tmp_path),
        ],
        embedder=embedder,
    )
    ab = r["ablation"]
    assert list(ab["variants"]) == [DEFAULT_VARIANT, "before: rrf at k-dependent depth", "score fusion"]
    # the default row is the main run's own figures; the variant without /v1/context has hybrid only
    assert ab["variants"][DEFAULT_VARIANT]["hybrid"]["recall@10"] == r["methods"]["hybrid"]["recall@10"]
    assert set(ab["variants"]["before: rrf at k-dependent depth"]) == {"context@1000", "hybrid"}
    assert set(ab["variants"]["score fusion"]) == {"hybrid"}
    for v in ab["variants"].values():
        h = v["hybrid"]
        assert 0 <= h["recall@5"] <= h["recall@10"] <= h["recall@25"] <= 1
    md = (tmp_path / "part.md").read_text()
    assert "## Ablation" in md and "before: rrf at k-dependent depth" in md
    assert (tmp_path / "part_before_after.png").stat().st_size > 10_000

    merged = merge(["merged", str(tmp_path / "part.json"), "--out", str(tmp_path)])
    again = json.loads((tmp_path / "merged.json").read_text())
    assert (
        merged["methods"]["hybrid"]["recall@10"] == r["methods"]["hybrid"]["recall@10"] == again["methods"]["hybrid"]["recall@10"]
    )
    assert again["ablation"]["variants"]["score fusion"]["hybrid"] == ab["variants"]["score fusion"]["hybrid"]
