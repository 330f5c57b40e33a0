"""Sessions: working-context blocks, a FIFO of messages and a recursive summary.

Pressure = tokens of the main context / budget. At 70% the context carries a warning; when a
new message takes it to 100%, the oldest half of the messages is evicted: folded into the
recursive summary (through the LLM gateway, with a deterministic fallback) and kept as
episodes of the session, so nothing is lost and everything stays searchable.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.context.assemble import Piece, render, sections
from app.episodes.schemas import EpisodeIn
from app.episodes.service import create_many
from app.kit.errors import AppError, NotFound
from app.sessions import repository as repo
from app.sessions.models import AgentSession, SessionMessage
from app.sessions.summary import summarise

PRESSURE_WARNING = 0.7
WARNING_TEXT = (
    "Memory pressure: the context is {pct:.0%} full. Save what matters with memory_add or "
    "working_context_replace; the oldest messages will be summarised and evicted at 100%."
)


def get(db: Session, principal: Principal, session_id: uuid.UUID, *, for_update: bool = False) -> AgentSession:
    s = repo.get_visible(db, principal, session_id, for_update=for_update)
    if s is None:
        raise NotFound("session not found")
    return s


def messages(db: Session, s: AgentSession) -> list[SessionMessage]:
    return repo.messages(db, s.org_id, s.id)


def session_pieces(db: Session, s: AgentSession) -> list[Piece]:
    pieces = [
        Piece("working_context", "block", label, f"{label}: {text}", pinned=True)
        for label, text in sorted(s.working_context.items())
    ]
    if s.summary:
        pieces.append(Piece("summary", "summary", None, s.summary, pinned=True))
    pieces += [
        Piece("recent_messages", "message", str(m.id), f"{m.role}: {m.content}", extra={"seq": m.seq}) for m in messages(db, s)
    ]
    return pieces


def main_context(db: Session, s: AgentSession, count) -> dict:
    pieces = session_pieces(db, s)
    text = render(pieces)
    tokens = count(text)
    pressure = tokens / s.budget_tokens
    out = {
        "id": s.id,
        "text": text,
        "tokens": tokens,
        "budget_tokens": s.budget_tokens,
        "pressure": round(min(1.0, pressure), 4),
        "summary": s.summary,
        "sections": sections(pieces, count),
        "evictions": s.evictions,
        "warning": None,
    }
    if pressure >= PRESSURE_WARNING:
        out["warning"] = WARNING_TEXT.format(pct=pressure)
        out["text"] = f"[{out['warning']}]\n\n{text}"
        out["tokens"] = count(out["text"])
    return out


def check_working_context(blocks: dict[str, str], budget: int, count) -> None:
    used = count(render([Piece("working_context", "block", k, f"{k}: {v}") for k, v in blocks.items()]))
    if used > budget // 2:
        raise AppError(
            f"working context takes {used} tokens; at most half the budget ({budget // 2})",
            code="working_context_too_large",
            status_code=422,
        )


def create(db: Session, principal: Principal, budget: int, blocks: dict[str, str], count) -> AgentSession:
    check_working_context(blocks, budget, count)
    s = AgentSession(
        id=uuid.uuid4(),
        org_id=principal.org_id,
        owner_id=principal.user_id,
        budget_tokens=budget,
        working_context=blocks,
        visibility="private",
    )
    db.add(s)
    db.flush()
    record(
        db,
        org_id=principal.org_id,
        actor_id=principal.user_id,
        action="session.create",
        target_type="session",
        target_id=s.id,
        details={"budget_tokens": budget},
    )
    return s


def add_message(db: Session, principal: Principal, resources, s: AgentSession, role: str, content: str) -> tuple:
    count = resources.gateway.count_tokens
    tokens = count(f"{role}: {content}")
    if tokens > s.budget_tokens // 2:
        raise AppError(
            f"message has {tokens} tokens; at most half the session budget ({s.budget_tokens // 2})",
            code="message_too_large",
            status_code=422,
        )
    m = SessionMessage(
        id=uuid.uuid4(),
        org_id=s.org_id,
        owner_id=s.owner_id,
        visibility=s.visibility,
        groups=s.groups,
        labels=s.labels,
        session_id=s.id,
        seq=s.next_seq,
        role=role,
        content=content,
        tokens=tokens,
    )
    s.next_seq += 1
    s.updated_at = datetime.now(UTC)
    db.add(m)
    db.flush()
    evicted = 0
    # "100%" counts what the context endpoint renders, pressure warning included, so that
    # GET /v1/sessions/{id}/context never exceeds the budget.
    while main_context(db, s, count)["tokens"] >= s.budget_tokens:
        n = evict(db, principal, resources, s, reason="pressure")
        if n == 0:
            break
        evicted += n
    record(
        db,
        org_id=principal.org_id,
        actor_id=principal.user_id,
        action="session.message",
        target_type="session",
        target_id=s.id,
        details={"message_id": str(m.id), "seq": m.seq, "role": m.role, "evicted": evicted},
    )
    return m, evicted, main_context(db, s, count)["pressure"]


def evict(
    db: Session, principal: Principal, resources, s: AgentSession, *, reason: str, only: list[SessionMessage] | None = None
) -> int:
    """Fold the oldest half (or `only` these) messages into the summary; keep them as episodes."""
    msgs = messages(db, s)
    out = only if only is not None else msgs[: max(1, len(msgs) // 2)] if len(msgs) > 1 else []
    if not out:
        return 0
    s.summary = summarise(
        resources.gateway, s.summary, [(m.role, m.content) for m in out], max_tokens=min(200, max(48, s.budget_tokens // 5))
    )
    items = [
        EpisodeIn(
            kind="conversation",
            content=f"{m.role}: {m.content}",
            session_id=str(s.id),
            messages=[{"role": m.role, "content": m.content, "at": m.created_at}],
            occurred_at=m.created_at,
            metadata={"session_seq": m.seq, "evicted": reason},
            visibility=s.visibility,
            groups=list(s.groups),
            labels=list(s.labels),
        )
        for m in out
    ]
    episodes = create_many(db, resources.embedder_for(db, principal.org_id), principal, items, owner_id=s.owner_id, audit=False)
    repo.delete_messages(db, s.org_id, [m.id for m in out])
    s.evictions += 1
    record(
        db,
        org_id=s.org_id,
        actor_id=principal.user_id,
        action="session.evict",
        target_type="session",
        target_id=s.id,
        details={"messages": len(out), "reason": reason, "episodes": [str(e.id) for e in episodes]},
    )
    db.flush()
    return len(out)


def report_outcome(db: Session, principal: Principal, s: AgentSession, outcome: str, reward: float | None) -> AgentSession:
    """The agent's verdict on the session (exported with its trajectory for policy training)."""
    s.outcome, s.reward = outcome, reward
    record(
        db,
        org_id=s.org_id,
        actor_id=principal.user_id,
        action="session.outcome",
        target_type="session",
        target_id=s.id,
        details={"outcome": outcome, "reward": reward},
    )
    db.flush()
    return s


def next_tool_seq(db: Session, s: AgentSession) -> int:
    return repo.next_tool_seq(db, s.org_id, s.id)


def delete_owned_by(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID) -> int:
    return repo.delete_owned_by(db, org_id, owner_id)
