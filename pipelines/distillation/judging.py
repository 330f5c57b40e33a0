"""The judge step of distillation: is an episode worth distilling?

The injection screen (suspicious → skipped, never shown to the model) + a usefulness heuristic (the
best lesson score of the episode's sentences) + the LLM's verdict, blended. Model output is data:
only known fields are read, and a bad answer is counted, never raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.llm.base import BaseGateway, JSONFailure
from pipelines.distillation import prompts as P
from pipelines.distillation.steps import EpisodeId, EpisodeText, StepStats, is_local, to_score


@dataclass(frozen=True)
class Judgement:
    id: EpisodeId
    useful: bool
    suspicious: bool
    score: float
    reason: str


@dataclass(frozen=True)
class JudgeConfig:
    threshold: float = 0.4  # tuned on bench/distillation dev (docs/llm.md)
    # None: 0.7 for real models; 0.0 for the local 135M model, which is then not asked at all: it
    # calls borderline episodes "not useful" whatever they say (docs/llm.md, limits of the local model).
    llm_weight: float | None = None
    llm_band: float | None = None  # ask only when the rule score is this close to the threshold (None: always)
    max_chars: int = 500
    max_tokens: int = 48


def usefulness_heuristic(ep: EpisodeText) -> tuple[float, str]:
    """A deterministic usefulness score in [0, 1] with a short reason: the best lesson score of the
    episode's sentences (``ep.candidates``); episodes without a lesson-bearing sentence score low."""
    words = P.words(ep.content)
    if len(words) < 3:
        return 0.05, "too short"
    content = [w for w in words if w not in P.SMALL_TALK and w not in P.STOP]
    if len(content) < 2:
        return 0.1, "small talk"
    if not ep.candidates:
        return 0.15, "no lesson-bearing sentence"
    best = max(ep.candidates, key=lambda c: c.score)
    return round(min(1.0, best.score), 3), f"lesson ({'+'.join(best.cues)})"


def judge(
    gateway: BaseGateway, episodes: Sequence[EpisodeText], *, config: JudgeConfig = JudgeConfig(), stats: StepStats | None = None
) -> list[Judgement]:
    """One judgement per episode, in input order. Never raises for a bad model answer."""
    stats = stats if stats is not None else StepStats()
    local = is_local(gateway)
    weight = config.llm_weight if config.llm_weight is not None else (0.0 if local else 0.7)
    band = config.llm_band
    out: list[Judgement] = []
    for ep in episodes:
        stats.judged += 1
        if ep.flags:  # never shown to the model: suspicious regardless of what an LLM would say
            stats.suspicious += 1
            out.append(Judgement(ep.id, False, True, 0.0, "pre-screen: instruction-like text (" + ", ".join(ep.flags) + ")"))
            continue
        h, h_why = usefulness_heuristic(ep)
        if weight <= 0 or (band is not None and abs(h - config.threshold) > band):
            stats.judge_llm_skipped += 1
            useful = h >= config.threshold
            stats.useful += useful
            out.append(Judgement(ep.id, useful, False, h, f"heuristic {h:.2f} ({h_why}); model not asked"))
            continue
        stats.llm_calls += 1
        verdict = gateway.chat_json(
            P.judge_messages(ep.content, kind=ep.kind, outcome=ep.outcome, max_chars=config.max_chars),
            P.Verdict,
            schema_hint=P.JUDGE_HINT,
            max_tokens=config.max_tokens,
        )
        llm_score, llm_susp, llm_why = None, False, ""
        if isinstance(verdict, JSONFailure):
            stats.llm_failures += 1
            llm_why = f"llm unusable ({verdict.error[:60]})"
        else:
            s, u = to_score(verdict.score), to_score(verdict.useful)
            llm_score = (s + u) / 2 if s is not None and u is not None else (s if s is not None else u)
            llm_susp = to_score(verdict.suspicious, 0.0) == 1.0
            llm_why = "llm gave no score" if llm_score is None else f"llm {llm_score:.2f}"
            if isinstance(verdict.reason, str) and verdict.reason.strip():
                llm_why += f" ({P.clip(verdict.reason, 60)})"
        score = h if llm_score is None else weight * llm_score + (1 - weight) * h
        suspicious = llm_susp
        useful = not suspicious and score >= config.threshold
        stats.suspicious += suspicious
        stats.useful += useful
        reason = f"heuristic {h:.2f} ({h_why}); {llm_why}" + ("; llm flagged suspicious" if llm_susp else "")
        out.append(Judgement(ep.id, useful, suspicious, round(score, 3), reason))
    return out
