"""Audit events: written in the caller's transaction, hash-chained per org.

Each event's hash = sha256(prev_hash || canonical JSON of its fields); the per-org advisory
lock serialises appends so the chain has no forks. `verify_chain` recomputes it.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timezone

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent

GENESIS = "0" * 64


def _digest(prev_hash: str, org_id, seq: int, at: datetime, actor_id, action: str,
            target_type, target_id, details: dict) -> str:
    body = json.dumps(
        {"org": str(org_id), "seq": seq, "at": at.isoformat(), "actor": str(actor_id) if actor_id else None,
         "action": action, "target_type": target_type, "target_id": target_id, "details": details},
        sort_keys=True, separators=(",", ":"), default=str,
    )
    return hashlib.sha256((prev_hash + body).encode()).hexdigest()


def record(db: Session, *, org_id: uuid.UUID, actor_id: uuid.UUID | None, action: str,
           target_type: str | None = None, target_id=None, details: dict | None = None) -> AuditEvent:
    """Append one event. Never put memory content or secrets in `details` (ids, counts, reasons)."""
    details = json.loads(json.dumps(details or {}, default=str))
    db.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 7))"), {"k": f"audit:{org_id}"})
    last = db.execute(
        select(AuditEvent.seq, AuditEvent.hash).where(AuditEvent.org_id == org_id)
        .order_by(AuditEvent.seq.desc()).limit(1)
    ).first()
    seq, prev = (last.seq + 1, last.hash) if last else (1, GENESIS)
    at = datetime.now(timezone.utc)
    tid = str(target_id) if target_id is not None else None
    ev = AuditEvent(org_id=org_id, seq=seq, at=at, actor_id=actor_id, action=action, target_type=target_type,
                    target_id=tid, details=details, prev_hash=prev,
                    hash=_digest(prev, org_id, seq, at, actor_id, action, target_type, tid, details))
    db.add(ev)
    db.flush()
    return ev


def verify_chain(db: Session, org_id: uuid.UUID) -> tuple[int, AuditEvent | None]:
    """Return (events checked, first broken event or None)."""
    prev = GENESIS
    n = 0
    rows = db.execute(select(AuditEvent).where(AuditEvent.org_id == org_id).order_by(AuditEvent.seq)).scalars()
    for ev in rows:
        n += 1
        expect = _digest(prev, ev.org_id, ev.seq, ev.at, ev.actor_id, ev.action, ev.target_type, ev.target_id, ev.details)
        if ev.prev_hash != prev or ev.hash != expect or ev.seq != n:
            return n, ev
        prev = ev.hash
    return n, None
