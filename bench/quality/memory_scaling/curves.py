"""What each curve of the scaling bench adds to an org's memory, one shard at a time: one place
for the main run (bench/quality/memory_scaling/__main__.py) and the run inside a branch
(bench/quality/memory_scaling/in_branch.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from bench.quality.memory_scaling import sources as src
from bench.quality.memory_scaling.spaces import Question, Space, make_space, write_glossary

CURVES = ("labelled", "unlabelled_judge", "bootstrap", "bootstrap_enriched")


@dataclass
class Data:
    """The spaces, their test questions and every shard of every curve, drawn once from the seed."""

    spaces: list[Space]
    tests: list[Question]
    labelled: list[list[dict]]
    logs: list[list[dict]]
    poison: list[dict]
    glossaries: dict[str, list[Path]]
    top: int

    @property
    def by_name(self) -> dict[str, Space]:
        return {sp.name: sp for sp in self.spaces}


def draw(a, tmp: Path) -> Data:
    rng = random.Random(a.seed)
    used: set[str] = set()
    spaces = [make_space(rng, i, tmp, used) for i in range(a.spaces)]
    tests = src.test_questions(rng, spaces, a.questions_per_space)
    top = max(a.points)
    labelled = [src.labelled_shard(rng, spaces, a.labelled_per_shard) for _ in range(top)]
    logs = [src.log_shard(rng, spaces, a.logs_per_shard) for _ in range(top)]
    poison = src.poison_shard(rng, spaces, a.poison)
    glossaries = {sp.name: write_glossary(sp, tmp, parts=max(1, top)) for sp in spaces}
    return Data(spaces, tests, labelled, logs, poison, glossaries, top)


def grow(h, org, curve: str, k: int, data: Data, *, measured: bool) -> None:
    """Add shard k (1-based) of `curve` to the org's memory; `measured`: a point is taken after it
    (the unlabelled curve distils only then, as a scheduled pipeline would between reads)."""
    if curve == "labelled":
        h.ingest(org, data.labelled[k - 1], user="steward", source="labelled")
    elif curve == "unlabelled_judge":
        h.ingest(org, data.logs[k - 1], user="logs", source="logs")
        if measured:
            h.distill(org)
    elif curve in ("bootstrap", "bootstrap_enriched"):
        for sp in data.spaces:
            h.bootstrap(org, sp, data.glossaries[sp.name][k - 1], enrich=curve == "bootstrap_enriched")
    else:
        raise ValueError(f"unknown curve {curve}")


def run_curve(h, org, curve: str, data: Data, points: list[int], measure) -> None:
    """Shards 1..top of `curve` into `org`, calling `measure(k)` after each measured point."""
    for k in range(1, data.top + 1):
        grow(h, org, curve, k, data, measured=k in points)
        if k in points:
            measure(k)
