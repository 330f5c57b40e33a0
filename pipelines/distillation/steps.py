"""What the distillation steps share (no database, no side effects).

- :class:`EpisodeText` is an episode prepared once: its injection screen and its lesson
  candidates (``lessons.candidates``) are computed when it is built, and every step reads them.
- :class:`StepStats` counts what the steps did and dropped, so a job can record why.
- :func:`to_score` reads a model's score in any of the shapes it writes; :func:`is_local` tells the
  bundled local model apart.

The steps themselves: ``judging.judge`` (is an episode worth keeping) and ``extraction.extract``
(memories citing their episodes). Episode ids are kept as given (UUIDs in the job) and become
strings only inside a prompt.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from app.llm.base import BaseGateway
from pipelines.distillation import lessons as L
from pipelines.distillation import prompts as P

EpisodeId = uuid.UUID | str  # the episode's UUID in the job; tests and benches use short strings


@dataclass(frozen=True)
class EpisodeText:
    """What the steps see of an episode (the API's request body is app.episodes.schemas.EpisodeIn),
    prepared once when built: ``flags`` (the injection screen of its content and outcome) and
    ``candidates`` (its lesson-bearing sentences) serve the judge, the usefulness heuristic and the
    rule extractor alike."""

    id: EpisodeId
    kind: str
    content: str
    outcome: str | None = None
    flags: tuple[str, ...] = field(init=False, repr=False, compare=False)
    candidates: tuple[L.Candidate, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "flags", tuple(P.screen_injection(f"{self.content}\n{self.outcome or ''}")))
        object.__setattr__(self, "candidates", tuple(L.candidates(self.content, kind=self.kind, outcome=self.outcome)))


@dataclass
class StepStats:
    judged: int = 0
    suspicious: int = 0
    useful: int = 0
    llm_calls: int = 0
    llm_failures: int = 0  # unusable or failed model answers (recorded, never raised)
    skipped_suspicious: int = 0
    dropped_uncited: int = 0
    dropped_bad_citation: int = 0
    dropped_ungrounded: int = 0
    dropped_suspicious: int = 0
    dropped_invalid: int = 0
    llm_memories: int = 0
    rule_memories: int = 0
    duplicates: int = 0
    llm_rewrites: int = 0  # rule statements the model rewrote (verified: values kept, grounded, clean)
    llm_rewrites_rejected: int = 0
    judge_llm_skipped: int = 0  # episodes the deterministic score decided without asking the model
    summary_fallbacks: int = 0  # counted by app.sessions.summary.summarise when given these stats

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def is_local(gateway: BaseGateway) -> bool:
    return str(getattr(gateway, "model", "")).startswith("local/")


def to_score(value: Any, default: float | None = None) -> float | None:
    """0.8, "0.8", "80%", 8 (of 10), "high" → a float in [0, 1]."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        v = float(value)
    elif isinstance(value, str):
        s = value.strip().lower()
        named = {
            "high": 0.85,
            "medium": 0.6,
            "med": 0.6,
            "low": 0.3,
            "none": 0.0,
            "true": 1.0,
            "yes": 1.0,
            "false": 0.0,
            "no": 0.0,
        }
        if s in named:
            return named[s]
        m = re.match(r"^(-?\d+(?:\.\d+)?)\s*(%?)", s)
        if not m:
            return default
        v = float(m.group(1)) / (100.0 if m.group(2) else 1.0)
    else:
        return default
    if v > 1.0:
        v = v / 10.0 if v <= 10.0 else v / 100.0
    return max(0.0, min(1.0, v))
