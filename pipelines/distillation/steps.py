"""LLM-facing pure steps of distillation (no database, no side effects).

- :class:`EpisodeText` is an episode prepared once: its injection screen and its lesson
  candidates (``lessons.candidates``) are computed when it is built, and every step reads them.
- :func:`judge` scores episodes: the injection screen (suspicious → skipped, never shown to the
  model) + a usefulness heuristic + the LLM's verdict, blended.
- :func:`extract` asks the LLM for memories citing source episodes, keeps only well-cited,
  grounded, clean ones, and adds a deterministic rule-based extractor for well-formed sentences.

Model output is data: only known fields are read, citations are checked against the batch the
model saw, and memory texts are screened for instruction-like content before they are kept.
Episode ids are kept as given (UUIDs in the job) and become strings only inside a prompt.
Counters go to an optional :class:`StepStats` so a job can record what was dropped and why.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

from app.llm.base import BaseGateway, JSONFailure, LLMError
from app.llm.guard import values
from app.memories import near_duplicates
from pipelines.distillation import lessons as L
from pipelines.distillation import prompts as P

log = logging.getLogger(__name__)

KINDS = P.KINDS

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


@dataclass(frozen=True)
class Judgement:
    id: EpisodeId
    useful: bool
    suspicious: bool
    score: float
    reason: str


@dataclass
class Extracted:
    text: str
    kind: str  # one of KINDS
    confidence: float
    source_ids: list[EpisodeId]
    method: str = "llm"  # "llm" | "rule" (deterministic lesson finder) | "rule+llm" (rewritten by the model)
    turns: dict[EpisodeId, list[int]] = field(default_factory=dict)  # source id -> turn indexes it came from


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


@dataclass(frozen=True)
class JudgeConfig:
    threshold: float = 0.4  # tuned on bench/distillation dev (docs/llm.md)
    # None: 0.7 for real models; 0.0 for the local 135M model, which is then not asked at all: it
    # calls borderline episodes "not useful" whatever they say (docs/llm.md, limits of the local model).
    llm_weight: float | None = None
    llm_band: float | None = None  # ask only when the rule score is this close to the threshold (None: always)
    max_chars: int = 500
    max_tokens: int = 48


@dataclass(frozen=True)
class ExtractConfig:
    batch_size: int | None = None  # None: 1 for the local model, 4 for others
    max_chars: int = 500
    max_tokens: int = 160
    min_grounding: float = 0.34
    fallback: bool = True  # the deterministic lesson finder (always on in the job)
    min_score: float = 0.4  # lesson score a candidate sentence needs to become a memory
    # LLM extraction: None = only for models other than the local one (SmolLM2 mostly copies its example)
    llm: bool | None = None
    # Let the model rewrite rule statements that are not yet clean (first/second person). The answer
    # is kept only if it keeps every value, is grounded and passes the statement checks.
    rewrite: bool = True


def _is_local(gateway: BaseGateway) -> bool:
    return str(getattr(gateway, "model", "")).startswith("local/")


# -- text helpers ---------------------------------------------------------------------------------


def _to_score(value: Any, default: float | None = None) -> float | None:
    """0.8, "0.8", "80%", 8 (of 10), "high" → a float in [0, 1]."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        v = float(value)
    elif isinstance(value, str):
        s = value.strip().lower()
        named = {"high": 0.85, "medium": 0.6, "med": 0.6, "low": 0.3, "none": 0.0,
                 "true": 1.0, "yes": 1.0, "false": 0.0, "no": 0.0}
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


# -- deterministic lesson finder (works without any model) --------------------------------------


def rule_extract(ep: EpisodeText, *, min_score: float = 0.4) -> list[Extracted]:
    """Memories from the lesson-bearing sentences of one episode (``ep.candidates``), as clean
    statements citing the episode and the turns they came from."""
    if ep.flags:
        return []
    out = []
    for c in ep.candidates:
        if c.score >= min_score and not P.screen_injection(c.statement):
            out.append(Extracted(text=c.statement, kind=c.kind, confidence=round(0.5 + 0.4 * c.score, 3),
                                 source_ids=[ep.id], method="rule", turns={ep.id: [c.turn]}))
    return out


# -- judge ----------------------------------------------------------------------------------------


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


def judge(gateway: BaseGateway, episodes: Sequence[EpisodeText], *, config: JudgeConfig = JudgeConfig(),
          stats: StepStats | None = None) -> list[Judgement]:
    """One judgement per episode, in input order. Never raises for a bad model answer."""
    stats = stats if stats is not None else StepStats()
    local = _is_local(gateway)
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
            P.Verdict, schema_hint=P.JUDGE_HINT, max_tokens=config.max_tokens,
        )
        llm_score, llm_susp, llm_why = None, False, ""
        if isinstance(verdict, JSONFailure):
            stats.llm_failures += 1
            llm_why = f"llm unusable ({verdict.error[:60]})"
        else:
            s, u = _to_score(verdict.score), _to_score(verdict.useful)
            llm_score = (s + u) / 2 if s is not None and u is not None else (s if s is not None else u)
            llm_susp = _to_score(verdict.suspicious, 0.0) == 1.0
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


# -- extract --------------------------------------------------------------------------------------


def extract(gateway: BaseGateway, episodes: Sequence[EpisodeText], *, config: ExtractConfig = ExtractConfig(),
            stats: StepStats | None = None) -> list[Extracted]:
    """Memories from episodes, each citing at least one episode of the batch it came from.

    The deterministic lesson finder always runs (``config.fallback``); the model adds memories the
    rules missed (``config.llm``; off for the local model) and rewrites rule statements that are
    not yet clean (``config.rewrite``), each answer verified before it is kept."""
    stats = stats if stats is not None else StepStats()
    clean = []
    for ep in episodes:
        if ep.flags:
            stats.skipped_suspicious += 1
        elif ep.content and ep.content.strip():
            clean.append(ep)
    use_llm = config.llm if config.llm is not None else not _is_local(gateway)
    size = max(1, config.batch_size or (1 if _is_local(gateway) else 4))
    found: list[Extracted] = []
    for start in range(0, len(clean), size):
        batch = clean[start : start + size]
        if use_llm:
            found += _extract_batch(gateway, batch, config, stats)
        if config.fallback:
            for ep in batch:
                rules = rule_extract(ep, min_score=config.min_score)
                if config.rewrite:
                    rules = [_rewrite(gateway, ep, r, stats) for r in rules]
                stats.rule_memories += len(rules)
                found += rules
    return _dedupe(found, stats)


def _rewrite(gateway: BaseGateway, ep: EpisodeText, item: Extracted, stats: StepStats) -> Extracted:
    """Ask the model to restate a rule statement that still speaks in first/second person; keep its
    answer only when it is one clean sentence with every value of the original and grounded."""
    if not _PERSON.search(item.text):
        return item
    stats.llm_calls += 1
    try:
        raw = gateway.chat(P.rewrite_messages(item.text), max_tokens=60)
    except LLMError:
        stats.llm_failures += 1
        return item
    text = L.statement(P.clip(raw.strip().splitlines()[0] if raw.strip() else "", 300))
    ok = (text and not _PERSON.search(text) and not L.SPEAKER_PREFIX.search(text) and not P.screen_injection(text)
          and all(v in text.lower() for v in values(item.text)) and 3 <= len(P.words(text)) <= 45
          and P.grounding(text, [ep.content, item.text]) >= 0.75 and not re.search(r"[.!?]\s+\S", text.rstrip(".!?")))
    if not ok:
        stats.llm_rewrites_rejected += 1
        return item
    stats.llm_rewrites += 1
    return Extracted(text=text, kind=item.kind, confidence=item.confidence, source_ids=item.source_ids,
                     method="rule+llm", turns=item.turns)


_PERSON = re.compile(r"\b(I|I'm|I'd|me|my|you|your|you're)\b")


def _extract_batch(gateway: BaseGateway, batch: list[EpisodeText], config: ExtractConfig,
                   stats: StepStats) -> list[Extracted]:
    aliases = {f"R{i + 1}": ep for i, ep in enumerate(batch)}
    by_key = {k.lower(): ep for k, ep in aliases.items()} | {str(ep.id).lower(): ep for ep in batch}
    records = [(alias, ep.kind, ep.content, ep.outcome) for alias, ep in aliases.items()]
    stats.llm_calls += 1
    answer = gateway.chat_json(P.extract_messages(records, max_chars=config.max_chars), list[P.RawMemory],
                               schema_hint=P.EXTRACT_HINT, max_tokens=config.max_tokens)
    if isinstance(answer, JSONFailure):
        stats.llm_failures += 1
        answer = P.parse_lines(answer.raw)
    out = []
    for item in answer:
        text = L.statement(" ".join(str(item.text or "").split()))
        if not 3 <= len(P.words(text)) <= 60 or L.SPEAKER_PREFIX.search(text):
            stats.dropped_invalid += 1
            continue
        cited = P.cited_ids(item.source)
        if not cited:
            stats.dropped_uncited += 1
            continue
        sources = [by_key.get(c.lower()) for c in cited]
        if any(s is None for s in sources):
            stats.dropped_bad_citation += 1
            continue
        ids = list(dict.fromkeys(s.id for s in sources if s is not None))
        g = P.grounding(text, [s.content for s in sources if s is not None])
        if g < config.min_grounding:
            stats.dropped_ungrounded += 1
            continue
        if P.screen_injection(text):
            stats.dropped_suspicious += 1
            continue
        confidence = _to_score(item.confidence, 0.6) or 0.6
        out.append(Extracted(text=P.clip(text, 300), kind=P.memory_kind(item.kind),
                             confidence=round(confidence * (0.5 + 0.5 * g), 3), source_ids=ids))
    stats.llm_memories += len(out)
    return out


def _dedupe(items: list[Extracted], stats: StepStats) -> list[Extracted]:
    """Merge the same statement found twice (``near_duplicates.repeats_in_batch``): sources, turns
    and the higher confidence are kept on the first."""
    kept: list[Extracted] = []
    for item in items:
        first = next((k for k in kept if near_duplicates.repeats_in_batch(
            k.text, item.text, shared_source=bool(set(k.source_ids) & set(item.source_ids)))), None)
        if first is None:
            kept.append(item)
            continue
        stats.duplicates += 1
        first.source_ids = list(dict.fromkeys(first.source_ids + item.source_ids))
        first.confidence = max(first.confidence, item.confidence)
        for sid, ts in item.turns.items():
            first.turns[sid] = sorted(set(first.turns.get(sid, []) + ts))
    return kept
