"""Trajectories for training memory-management policies (AgeMem-style): per session, the
ordered tool calls with their arguments and result summaries, and the reported outcome/reward."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from sqlalchemy.orm import Session

from app.sessions import repository as repo


def trajectories(db: Session, org_id: uuid.UUID) -> Iterator[dict]:
    for s in repo.sessions_of_org(db, org_id):
        calls = repo.tool_calls(db, s.org_id, s.id)
        if not calls:
            continue
        yield {
            "session_id": str(s.id),
            "user_id": str(s.owner_id),
            "budget_tokens": s.budget_tokens,
            "evictions": s.evictions,
            "outcome": s.outcome,
            "reward": s.reward,
            "steps": [
                {
                    "seq": c.seq,
                    "tool": c.name,
                    "arguments": c.arguments,
                    "result": c.result,
                    "status": c.status,
                    "at": c.created_at.isoformat(),
                }
                for c in calls
            ],
        }
