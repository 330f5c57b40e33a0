"""Distillation: episodes → judged → extracted memories (LLM-facing pure steps in ``steps``).

The job that reads episodes from Postgres, groups them by access scope, deduplicates against
active memories and writes memories with lineage is wired on top of these steps.
"""

from app.sessions.summary import SummaryConfig, summarise
from pipelines.distillation.steps import (
    EpisodeText,
    ExtractConfig,
    Extracted,
    Judgement,
    JudgeConfig,
    StepStats,
    extract,
    judge,
    rule_extract,
    usefulness_heuristic,
)

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
