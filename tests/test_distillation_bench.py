"""bench/quality/distillation: the labelled set's shape, the scorer on hand-made memories, and the quick
mode end to end (real service, real job, real local model)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from bench.quality.distillation.data import LESSONS, TRACES, split
from bench.quality.distillation.score import Mem, quality_flags, score, states


def test_labelled_set_covers_the_brief():
    assert len(TRACES) >= 150
    assert {t.split for t in TRACES} == {"dev", "test"}
    for name in ("dev", "test"):
        part = split(name)
        cats = Counter(t.category for t in part)
        assert {"rule", "preference", "fact", "convention", "trajectory", "correction", "chatter"} <= set(cats), name
        assert {t.visibility for t in part} == {"private", "group", "org"}
        assert cats["chatter"] >= 20
    # several phrasings of one lesson, and no lesson shared across the split
    per_lesson = Counter(lid for t in TRACES for lid in t.lessons)
    assert sum(1 for n in per_lesson.values() if n >= 2) >= 30
    assert all(LESSONS[lid].split == t.split for t in TRACES for lid in t.lessons)


def test_scorer_counts_recall_precision_chatter_scope_and_quality():
    fr = next(t for t in TRACES if t.id == "frz-1")  # org, alice
    chat = next(t for t in TRACES if t.id == "chat-2")  # private, bob
    mems = [
        Mem("1", "Production deploys are frozen every Friday.", "alice", "org", (), (), ["frz-1"]),
        Mem("2", "No releases on Fridays to production.", "alice", "org", (), (), ["frz-1"]),  # duplicate
        Mem("3", "User: thanks, that worked.", "bob", "org", (), (), ["chat-2"]),  # chatter, prefix, too wide
    ]
    r = score([fr, chat], mems)
    assert r["lesson_recall"] == 1.0 and r["precision"] == round(2 / 3, 3)
    assert r["chatter_yield"] == 1.0 and r["duplicate_rate"] == round(1 / 3, 3)
    assert r["scope_wider"] == 1 and r["scope_exact"] == round(2 / 3, 3) and r["speaker_prefix"] == 1
    assert states("Deploys are frozen on Friday.", "frz") and not states("Deploys are frozen.", "frz")
    assert quality_flags("It is frozen. Ask Bob.") == {"speaker_prefix": False, "one_sentence": False, "self_contained": False}


@pytest.mark.slow
def test_distillation_bench_quick(settings, embedder, tmp_path):
    from bench.quality.distillation.__main__ import main

    r = main(["--quick", "--out", str(tmp_path)], embedder=embedder)
    saved = json.loads((tmp_path / "distillation_quick.json").read_text())
    q = saved["splits"]["quick"] == r["splits"]["quick"] and r["splits"]["quick"]
    assert q["traces"] == 12 and q["chatter_traces"] == 4 and q["memories"] >= 1
    for k in ("lesson_recall", "precision", "chatter_yield", "duplicate_rate", "scope_exact", "one_sentence"):
        assert 0.0 <= q[k] <= 1.0, k
    assert q["scope_wider"] == 0 and q["speaker_prefix"] == 0
    assert q["job_stats"]["seen"] == 12 and q["episodes_per_minute"] > 0
