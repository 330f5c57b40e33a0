"""Scoring of distilled memories against the labelled traces (pure: no database, no model).

- **lesson recall**: share of (trace, lesson) labels for which a memory citing that trace states
  the lesson (every key group of the lesson occurs in the memory text). Also per unique lesson.
- **precision**: share of memories that state a lesson labelled on one of their source traces.
- **chatter yield**: share of chatter traces cited by at least one memory.
- **duplicate rate**: share of memories stating a lesson that an earlier memory with the same
  audience already states (what a reader sees twice).
- **scope**: a memory is *wider* when it reveals more than the most restrictive combination of its
  sources (``app.kit.tenancy.scope.no_wider``); *exact* when the set of benchmark users who can read it is
  the set who can read all its sources.
- **statement quality**: no speaker prefix, one sentence, self-contained (does not open with a
  pronoun that points outside the statement, no first/second person), and for memories from
  lesson-bearing traces, the key values kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.quality.distillation.data import LESSONS, USERS, Trace


@dataclass
class Mem:
    id: str
    text: str
    owner: str  # benchmark user name
    visibility: str
    groups: tuple[str, ...]
    labels: tuple[str, ...]
    sources: list[str]  # trace ids
    method: str = ""


def states(text: str, lesson_id: str) -> bool:
    low = text.lower()
    return all(any(alt.lower() in low for alt in group.split("|")) for group in LESSONS[lesson_id].keys)


SPEAKER = re.compile(r"(^|\s)(user|assistant|human|ai|agent|bot|system|tool|customer|alice|bob|carol|dave)\s*:", re.I)
_DANGLING = re.compile(r"^(it|this|that|these|those|they|he|she|them|here|there|which|also|and|but|so|both)\b", re.I)
_PERSON = re.compile(r"\b(i|i'm|i'd|i'll|me|my|mine|you|your|you're|yours)\b", re.I)


def quality_flags(text: str) -> dict[str, bool]:
    t = text.strip()
    body = t.rstrip(".!?")
    return {
        "speaker_prefix": bool(SPEAKER.search(t)),
        "one_sentence": bool(t) and t[-1] in ".!?" and not re.search(r"[.!?]\s+[A-Z]", body) and "\n" not in t,
        "self_contained": not _DANGLING.match(t) and not _PERSON.search(t),
    }


def audience(visibility: str, owner: str, groups: tuple[str, ...]) -> frozenset[str]:
    if visibility == "org":
        return frozenset(USERS)
    if visibility == "group":
        return frozenset(u for u, gs in USERS.items() if set(gs) & set(groups))
    return frozenset({owner})


def score(traces: list[Trace], mems: list[Mem], *, seconds: float | None = None) -> dict:
    from app.kit.tenancy import scope as scopes

    by_id = {t.id: t for t in traces}
    cited: dict[str, list[Mem]] = {}
    for m in mems:
        for s in m.sources:
            cited.setdefault(s, []).append(m)
    labels = [(t, lid) for t in traces for lid in t.lessons]
    hit = [(t, lid) for t, lid in labels if any(states(m.text, lid) for m in cited.get(t.id, []))]
    lessons = sorted({lid for _, lid in labels})
    lesson_hit = [lid for lid in lessons if any(states(m.text, lid) for m in mems)]
    correct, wrong = [], []
    for m in mems:
        own = {lid for s in m.sources if s in by_id for lid in by_id[s].lessons}
        (correct if any(states(m.text, lid) for lid in own) else wrong).append(m)
    chatter = [t for t in traces if t.category == "chatter"]
    chatter_hit = [t for t in chatter if cited.get(t.id)]
    seen: set[tuple] = set()
    dups = 0
    for m in mems:
        aud = audience(m.visibility, m.owner, m.groups)
        for lid in LESSONS:
            if states(m.text, lid):
                if (aud, lid) in seen:
                    dups += 1
                    break
        for lid in LESSONS:
            if states(m.text, lid):
                seen.add((aud, lid))
    wider = exact = 0
    for m in mems:
        src = [by_id[s] for s in m.sources if s in by_id]
        srcs = [scopes.Scope(t.visibility, owner_id=t.owner if t.visibility == "private" else None, groups=t.groups) for t in src]
        bound = scopes.derive(srcs)
        mine = scopes.Scope(
            m.visibility, owner_id=m.owner if m.visibility == "private" else None, groups=m.groups, labels=m.labels
        )
        wider += bound is None or not scopes.no_wider(mine, bound)
        want = frozenset.intersection(*[audience(t.visibility, t.owner, t.groups) for t in src]) if src else frozenset()
        exact += audience(m.visibility, m.owner, m.groups) == want
    flags = [quality_flags(m.text) for m in mems]
    from_lessons = [m for m in mems if any(by_id[s].lessons for s in m.sources if s in by_id)]
    keys_kept = [m for m in from_lessons if m in correct]
    n = max(1, len(mems))
    cats = sorted({t.category for t in traces if t.lessons})
    per_cat = {}
    for c in cats:
        lab = [(t, lid) for t, lid in labels if t.category == c]
        per_cat[c] = {"labels": len(lab), "recall": _r(sum(1 for x in lab if x in hit) / max(1, len(lab)))}
    out = {
        "traces": len(traces),
        "lesson_labels": len(labels),
        "lessons": len(lessons),
        "chatter_traces": len(chatter),
        "memories": len(mems),
        "lesson_recall": _r(len(hit) / max(1, len(labels))),
        "unique_lesson_recall": _r(len(lesson_hit) / max(1, len(lessons))),
        "precision": _r(len(correct) / n) if mems else None,
        "chatter_yield": _r(len(chatter_hit) / max(1, len(chatter))),
        "duplicate_rate": _r(dups / n),
        "scope_wider": wider,
        "scope_exact": _r(exact / n),
        "speaker_prefix": sum(f["speaker_prefix"] for f in flags),
        "one_sentence": _r(sum(f["one_sentence"] for f in flags) / n),
        "self_contained": _r(sum(f["self_contained"] for f in flags) / n),
        "keys_kept": _r(len(keys_kept) / max(1, len(from_lessons))),
        "per_category": per_cat,
        "methods": {k: sum(1 for m in mems if m.method == k) for k in sorted({m.method for m in mems})},
        "missed": [f"{t.id} [{lid}] {t.content[:90]!r}" for t, lid in labels if (t, lid) not in hit],
        "wrong": [f"{m.text!r} <- {','.join(m.sources)}" for m in wrong],
        "chatter_memories": [f"{m.text!r} <- {','.join(m.sources)}" for t in chatter_hit for m in cited[t.id]],
        "bad_statements": [
            m.text for m, f in zip(mems, flags) if f["speaker_prefix"] or not f["one_sentence"] or not f["self_contained"]
        ],
    }
    if seconds is not None:
        out["seconds"] = round(seconds, 1)
        out["episodes_per_minute"] = round(len(traces) / max(seconds, 1e-9) * 60, 1)
    return out


def _r(x: float) -> float:
    return round(x, 3)
