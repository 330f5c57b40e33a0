"""The extract step of distillation: memories citing the episodes they came from.

The deterministic lesson finder (:func:`rule_extract`, works without any model) always runs; the
LLM adds memories the rules missed and rewrites rule statements that still speak in first or
second person. Model output is data: only known fields are read, citations are checked against
the batch the model saw, and memory texts are screened for instruction-like content before they
are kept. Counters go to ``steps.StepStats`` so a job can record what was dropped and why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.llm.base import BaseGateway, JSONFailure, LLMError
from app.llm.guard import values
from app.memories import near_duplicates
from pipelines.distillation import prompts as P
from pipelines.distillation.segment import SPEAKER_PREFIX
from pipelines.distillation.statements import statement
from pipelines.distillation.steps import EpisodeId, EpisodeText, StepStats, is_local, to_score


@dataclass
class Extracted:
    text: str
    kind: str  # one of prompts.KINDS
    confidence: float
    source_ids: list[EpisodeId]
    method: str = "llm"  # "llm" | "rule" (deterministic lesson finder) | "rule+llm" (rewritten by the model)
    turns: dict[EpisodeId, list[int]] = field(default_factory=dict)  # source id -> turn indexes it came from


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


def rule_extract(ep: EpisodeText, *, min_score: float = 0.4) -> list[Extracted]:
    """Memories from the lesson-bearing sentences of one episode (``ep.candidates``), as clean
    statements citing the episode and the turns they came from."""
    if ep.flags:
        return []
    out = []
    for c in ep.candidates:
        if c.score >= min_score and not P.screen_injection(c.statement):
            out.append(
                Extracted(
                    text=c.statement,
                    kind=c.kind,
                    confidence=round(0.5 + 0.4 * c.score, 3),
                    source_ids=[ep.id],
                    method="rule",
                    turns={ep.id: [c.turn]},
                )
            )
    return out


def extract(
    gateway: BaseGateway,
    episodes: Sequence[EpisodeText],
    *,
    config: ExtractConfig = ExtractConfig(),
    stats: StepStats | None = None,
) -> list[Extracted]:
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
    use_llm = config.llm if config.llm is not None else not is_local(gateway)
    size = max(1, config.batch_size or (1 if is_local(gateway) else 4))
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
    text = statement(P.clip(raw.strip().splitlines()[0] if raw.strip() else "", 300))
    ok = (
        text
        and not _PERSON.search(text)
        and not SPEAKER_PREFIX.search(text)
        and not P.screen_injection(text)
        and all(v in text.lower() for v in values(item.text))
        and 3 <= len(P.words(text)) <= 45
        and P.grounding(text, [ep.content, item.text]) >= 0.75
        and not re.search(r"[.!?]\s+\S", text.rstrip(".!?"))
    )
    if not ok:
        stats.llm_rewrites_rejected += 1
        return item
    stats.llm_rewrites += 1
    return Extracted(
        text=text, kind=item.kind, confidence=item.confidence, source_ids=item.source_ids, method="rule+llm", turns=item.turns
    )


_PERSON = re.compile(r"\b(I|I'm|I'd|me|my|you|your|you're)\b")


def _extract_batch(gateway: BaseGateway, batch: list[EpisodeText], config: ExtractConfig, stats: StepStats) -> list[Extracted]:
    aliases = {f"R{i + 1}": ep for i, ep in enumerate(batch)}
    by_key = {k.lower(): ep for k, ep in aliases.items()} | {str(ep.id).lower(): ep for ep in batch}
    records = [(alias, ep.kind, ep.content, ep.outcome) for alias, ep in aliases.items()]
    stats.llm_calls += 1
    answer = gateway.chat_json(
        P.extract_messages(records, max_chars=config.max_chars),
        list[P.RawMemory],
        schema_hint=P.EXTRACT_HINT,
        max_tokens=config.max_tokens,
    )
    if isinstance(answer, JSONFailure):
        stats.llm_failures += 1
        answer = P.parse_lines(answer.raw)
    out = []
    for item in answer:
        text = statement(" ".join(str(item.text or "").split()))
        if not 3 <= len(P.words(text)) <= 60 or SPEAKER_PREFIX.search(text):
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
        confidence = to_score(item.confidence, 0.6) or 0.6
        out.append(
            Extracted(
                text=P.clip(text, 300),
                kind=P.memory_kind(item.kind),
                confidence=round(confidence * (0.5 + 0.5 * g), 3),
                source_ids=ids,
            )
        )
    stats.llm_memories += len(out)
    return out


def _dedupe(items: list[Extracted], stats: StepStats) -> list[Extracted]:
    """Merge the same statement found twice (``near_duplicates.repeats_in_batch``): sources, turns
    and the higher confidence are kept on the first."""
    kept: list[Extracted] = []
    for item in items:
        first = next(
            (
                k
                for k in kept
                if near_duplicates.repeats_in_batch(
                    k.text, item.text, shared_source=bool(set(k.source_ids) & set(item.source_ids))
                )
            ),
            None,
        )
        if first is None:
            kept.append(item)
            continue
        stats.duplicates += 1
        first.source_ids = list(dict.fromkeys(first.source_ids + item.source_ids))
        first.confidence = max(first.confidence, item.confidence)
        for sid, ts in item.turns.items():
            first.turns[sid] = sorted(set(first.turns.get(sid, []) + ts))
    return kept
