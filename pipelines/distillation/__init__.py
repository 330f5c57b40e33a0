"""Distillation: episodes → judged → extracted memories (LLM-facing pure steps: ``steps`` holds what
they share, ``judging`` and ``extraction`` the two steps, ``lessons`` the deterministic lesson finder).

The job that reads episodes from Postgres, groups them by access scope, deduplicates against
active memories and writes memories with lineage is wired on top of these steps.
"""

from app.sessions.summary import SummaryConfig, summarise
from pipelines.distillation.extraction import ExtractConfig, Extracted, extract, rule_extract
from pipelines.distillation.judging import JudgeConfig, Judgement, judge, usefulness_heuristic
from pipelines.distillation.steps import EpisodeText, StepStats

__all__ = [
    "EpisodeText",
    "ExtractConfig",
    "Extracted",
    "JudgeConfig",
    "Judgement",
    "StepStats",
    "SummaryConfig",
    "extract",
    "judge",
    "rule_extract",
    "summarise",
    "usefulness_heuristic",
]
