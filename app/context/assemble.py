"""Budgeted context assembly (MemGPT's main context): choose and order what goes in the prompt.

Ranking: retrieval score (RRF of vector + text) x confidence x recency; successful trajectories
before others. Filling: working context and summary first, then recent messages (up to a share
of the budget), then retrieved items by score. The rendered text is counted with the configured
model's tokenizer and trimmed until it fits: `tokens <= budget` always holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

SECTION_ORDER = ("instructions", "skills", "working_context", "summary", "memories", "examples", "knowledge",
                 "recent_messages")
TITLES = {"instructions": "Instructions", "skills": "Skills", "working_context": "Working context",
          "summary": "Conversation summary",
          "memories": "Relevant memories", "examples": "Examples from past episodes", "knowledge": "Knowledge",
          "recent_messages": "Recent messages"}
HALF_LIFE_DAYS = 90.0


@dataclass
class Piece:
    section: str
    type: str
    id: str | None
    text: str
    score: float = 0.0
    pinned: bool = False  # working context / summary: never dropped for retrieved items
    extra: dict = field(default_factory=dict)


def recency(at: datetime | None, now: datetime) -> float:
    if at is None:
        return 1.0
    days = max(0.0, (now - at).total_seconds() / 86400)
    return 0.5 + 0.5 * math.pow(0.5, days / HALF_LIFE_DAYS)


def in_order(pieces: list[Piece], name: str) -> list[Piece]:
    """One section's pieces as rendered. Episodes of one session are kept together and in time
    order (a retrieved turn and its neighbours read as dialogue), sessions by their best piece."""
    items = [p for p in pieces if p.section == name]
    if name != "examples":
        return items
    group = {}
    for p in items:
        group.setdefault(p.extra.get("session_id") or p.id, len(group))
    return sorted(items, key=lambda p: (group[p.extra.get("session_id") or p.id], p.extra.get("occurred_at") or ""))


def render(pieces: list[Piece]) -> str:
    out = []
    for name in SECTION_ORDER:
        items = in_order(pieces, name)
        if items:
            out.append(f"## {TITLES[name]}\n" + "\n".join(_lines(items)))
    return "\n\n".join(out)


def _lines(items: list[Piece]) -> list[str]:
    """Episodes are dated (questions are often about when): the turns of one conversation session
    on one day under a single header line, any other episode with the date in front."""
    lines, group = [], None
    for p in items:
        at = p.extra.get("occurred_at")
        day = f"{datetime.fromisoformat(at):%-d %B %Y}" if at else None
        if p.type != "episode":
            lines.append(f"- {p.text}")
        elif p.extra.get("kind") == "conversation" and p.extra.get("session_id"):
            if group != (p.extra["session_id"], day):
                group = (p.extra["session_id"], day)
                lines.append(f"Session {group[0]}" + (f", {day}:" if day else ":"))
            lines.append(f"- {p.text}")
        else:
            group = None
            lines.append(f"- ({day}) {p.text}" if day else f"- {p.text}")
    return lines


def fit(pieces: list[Piece], budget: int, count: Callable[[str], int], *, recent_share: float = 0.35) -> list[Piece]:
    """Greedy fill by priority using per-piece token counts (each text is tokenised once), then
    an exact count of the rendered text, trimming the lowest-scored pieces until it fits."""
    cost = {id(p): count(f"- {p.text}") + 1 for p in pieces}
    header = {name: count(f"## {TITLES[name]}") + 2 for name in SECTION_ORDER}
    chosen: list[Piece] = []
    used, open_sections = 0, set()

    def add(p: Piece, limit: int) -> bool:
        nonlocal used
        extra = cost[id(p)] + (0 if p.section in open_sections else header[p.section])
        if used + extra > limit:
            return False
        chosen.append(p)
        open_sections.add(p.section)
        used += extra
        return True

    for p in (p for p in pieces if p.pinned):
        if not add(p, budget):  # a pinned piece that does not fit is cut to what does
            words = p.text.split()
            while words:
                words = words[: int(len(words) * 0.8)]
                cut = Piece(**{**p.__dict__, "text": " ".join(words) + " …"})
                cost[id(cut)] = count(f"- {cut.text}") + 1
                if add(cut, budget):
                    break
    recent_limit = used + int(budget * recent_share)
    recent = [p for p in pieces if p.section == "recent_messages"]
    kept = 0
    for p in reversed(recent):  # newest first
        if not add(p, min(budget, recent_limit)):
            break
        kept += 1
    # keep the recent messages in their original order
    if kept:
        tail = chosen[-kept:]
        del chosen[-kept:]
        chosen += list(reversed(tail))
    for p in sorted((p for p in pieces if not p.pinned and p.section != "recent_messages"), key=lambda p: -p.score):
        add(p, budget)
    while chosen and count(render(chosen)) > budget:  # exact check: never over budget
        removable = [p for p in chosen if not p.pinned] or chosen
        chosen.remove(min(removable, key=lambda p: p.score))
    return chosen


def sections(chosen: list[Piece], count: Callable[[str], int]) -> list[dict]:
    out = []
    for name in SECTION_ORDER:
        items = in_order(chosen, name)
        if items:
            out.append({"name": name, "tokens": count(render(items)),
                        "items": [{"type": p.type, "id": p.id, "text": p.text, "score": round(p.score, 6), **p.extra}
                                  for p in items]})
    return out


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
