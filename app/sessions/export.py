"""Trajectories for training memory-management policies (AgeMem-style): per session, the
ordered tool calls with their arguments and result summaries, and the reported outcome/reward."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.sessions.models import AgentSession, ToolCall


def trajectories(db: Session, org_id: uuid.UUID) -> Iterator[dict]:
    sessions = db.execute(select(AgentSession).where(AgentSession.org_id == org_id)
                          .order_by(AgentSession.created_at)).scalars()
    for s in sessions:
        calls = db.execute(select(ToolCall).where(ToolCall.session_id == s.id).order_by(ToolCall.seq)).scalars().all()
        if not calls:
            continue
        yield {"session_id": str(s.id), "user_id": str(s.owner_id), "budget_tokens": s.budget_tokens,
               "evictions": s.evictions, "outcome": s.outcome, "reward": s.reward,
               "steps": [{"seq": c.seq, "tool": c.name, "arguments": c.arguments, "result": c.result, "status": c.status,
                          "at": c.created_at.isoformat()} for c in calls]}
