"""Budgeted context assembly (MemGPT's main context): choose and order what goes in the prompt.

Ranking: retrieval score (hybrid search's fused score) x confidence x recency; successful trajectories
before others. Filling: working context and summary first, then recent messages (up to a share
of the budget), then retrieved items by score. The rendered text is counted with the configured
model's tokenizer and trimmed until it fits: `tokens <= budget` always holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

SECTION_ORDER = ("instructions", "skills", "working_context", "summary", "memories", "examples", "knowledge", "recent_messages")
TITLES = {
    "instructions": "Instructions",
    "skills": "Skills",
    "working_context": "Working context",
    "summary": "Conversation summary",
    "memories": "Relevant memories",
    "examples": "Examples from past episodes",
    "knowledge": "Knowledge",
    "recent_messages": "Recent messages",
}
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
    on one day under a single header line (`group_header`), any other episode with the date in front."""
    lines, group = [], None
    for p in items:
        g = conversation_group(p)
        if g is not None:
            if g != group:
                group = g
                lines.append(group_header(g))
            lines.append(f"- {p.text}")
        elif p.type == "episode" and p.extra.get("occurred_at"):
            group = None
            lines.append(f"- ({_day(p)}) {p.text}")
        else:
            group = None
            lines.append(f"- {p.text}")
    return lines


def _day(p: Piece) -> str | None:
    at = p.extra.get("occurred_at")
    return f"{datetime.fromisoformat(at):%-d %B %Y}" if at else None


def conversation_group(p: Piece) -> tuple[str, str | None] | None:
    """(session id, day) of a conversation turn, rendered under one header; None for any other piece."""
    if p.type == "episode" and p.extra.get("kind") == "conversation" and p.extra.get("session_id"):
        return p.extra["session_id"], _day(p)
    return None


def group_header(group: tuple[str, str | None]) -> str:
    """The date alone ("8 May 2023:"): the session id is in the structured sections, and in the
    prompt it cost 10 tokens a group as `conv-26-s3` and 39 as a UUID, a turn's worth (~37
    tokens on LoCoMo) for every session the context draws from. Undated turns keep the id."""
    session, day = group
    return f"{day}:" if day else f"Session {session}:"


def fit(
    pieces: list[Piece],
    budget: int,
    count: Callable[[str], int],
    *,
    recent_share: float = 0.35,
    count_many: Callable[[list[str]], list[int]] | None = None,
) -> list[Piece]:
    """Greedy fill by priority using per-piece token counts (each text is tokenised once, all in
    one batch with `count_many`; a section's or a conversation group's header is paid by the
    piece that opens it), then an exact count of the rendered text, trimming the lowest-scored
    pieces until it fits."""
    lines = [f"- {p.text}" for p in pieces]
    counts = count_many(lines) if count_many is not None else [count(t) for t in lines]
    cost = {id(p): n + 1 for p, n in zip(pieces, counts)}
    header = {name: count(f"## {TITLES[name]}") + 2 for name in SECTION_ORDER}
    group_cost: dict = {}  # a conversation group's header line, paid by the first turn of the group
    chosen: list[Piece] = []
    used, open_sections, open_groups = 0, set(), set()

    def add(p: Piece, limit: int) -> bool:
        nonlocal used
        g = conversation_group(p)
        if g is not None and g not in group_cost:
            group_cost[g] = count(group_header(g)) + 1
        extra = (
            cost[id(p)]
            + (0 if p.section in open_sections else header[p.section])
            + (group_cost[g] if g is not None and g not in open_groups else 0)
        )
        if used + extra > limit:
            return False
        chosen.append(p)
        open_sections.add(p.section)
        if g is not None:
            open_groups.add(g)
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


def trim(chosen: list[Piece], cut: int | None, bin_of: Callable[[float, float], int], *, floor: int) -> list[Piece]:
    """`chosen` without the retrieved pieces (neither pinned nor recent messages) from bin `cut`
    down, by their score relative to the top retrieved score (`bin_of(score, top)`, app/feedback/
    calibration.py), the `floor` best always kept. Only removes: the result is a subset of `chosen`
    in its order, and `cut` None returns `chosen` itself."""
    if cut is None:
        return chosen
    retrieved = sorted((p for p in chosen if not p.pinned and p.section != "recent_messages"), key=lambda p: -p.score)
    if len(retrieved) <= floor:
        return chosen
    top = retrieved[0].score
    out = {id(p) for p in retrieved[floor:] if bin_of(p.score, top) >= cut}
    return [p for p in chosen if id(p) not in out]


def sections(chosen: list[Piece], count: Callable[[str], int]) -> list[dict]:
    out = []
    for name in SECTION_ORDER:
        items = in_order(chosen, name)
        if items:
            out.append(
                {
                    "name": name,
                    "tokens": count(render(items)),
                    "items": [{"type": p.type, "id": p.id, "text": p.text, "score": round(p.score, 6), **p.extra} for p in items],
                }
            )
    return out


def now_utc() -> datetime:
    return datetime.now(UTC)
