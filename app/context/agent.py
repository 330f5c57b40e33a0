"""An agent's profile in its context ("agent as memory"): the agent's identity lives in
memscale, not in a model's weights or a prompt file. Its instructions (its system prompt) and
skills are memories of kinds `instruction` and `skill` with its `agent_id`: versioned, scoped and
branchable like any memory, read in the request's view (main, a branch, as of an instant). So
switching the chat model changes nothing the agent knows: the same context is assembled for any.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.context.assemble import Piece
from app.kit.errors import NotFound
from app.kit.runtime.embedding import vector
from app.memories import service as memories

SKILL_BASE = 2.0  # above any retrieval score: relevant skills are placed before retrieved items


def agent_pieces(db: Session, principal: Principal, agent_id: str, qvec) -> list[Piece]:
    """Instructions pinned (never dropped for retrieved items), skills ranked by relevance to
    the query. 404 when the caller can see no profile of that agent."""
    rows = memories.agent_profile(db, principal, agent_id)
    if not rows:
        raise NotFound(f"agent {agent_id!r} has no profile you can see", code="agent_not_found")
    q = np.asarray(vector(qvec), dtype=np.float32)
    out = []
    for m in rows:
        extra = {"kind": m.kind, "agent_id": agent_id, "version": m.version}
        if m.kind == "instruction":
            out.append(Piece("instructions", "memory", str(m.id), m.text, 1.0, pinned=True, extra=extra))
        else:
            cos = float(np.dot(q, np.asarray(m.embedding, dtype=np.float32))) if m.embedding is not None else 0.0
            out.append(Piece("skills", "memory", str(m.id), m.text, SKILL_BASE + cos, extra=extra))
    return out
