"""Audit events: written in the caller's transaction, hash-chained per org, sealed with a key.

Each event's hash = sha256(prev_hash || canonical JSON of its fields); the per-org advisory
lock serialises appends so the chain has no forks. Each event is also sealed: `mac` =
HMAC-SHA256(audit key, hash), with a key the service holds (MEMSCALE_AUDIT_KEY or
<data_dir>/audit.key) and the database never sees. `verify_chain` recomputes both.

Which attacker each control stops (docs/security.md):
- the append-only triggers: the app role rewriting or deleting past events;
- the hash chain: anyone editing a stored event without recomputing every later hash;
- the seal: anyone holding only database credentials (the app role, a leaked password, a
  superuser, a restored backup) who appends or rewrites well-formed events: without the service's
  key their events carry no valid seal. It does not stop an attacker running code inside the
  service process (they hold the key); for that, export signed checkpoints (`memscale audit
  checkpoint`) to storage the service cannot write.
Events written before sealing existed (mac NULL) are accepted only before an org's first sealed one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.audit import repository as repo
from app.audit.models import AuditEvent
from app.kit.errors import BadRequest
from app.kit.runtime.signing import mac_hex

GENESIS = "0" * 64


def _digest(
    prev_hash: str, org_id, seq: int, at: datetime, actor_id, action: str, *, target_type, target_id, details: dict
) -> str:
    body = json.dumps(
        {
            "org": str(org_id),
            "seq": seq,
            "at": at.isoformat(),
            "actor": str(actor_id) if actor_id else None,
            "action": action,
            "target_type": target_type,
            "target_id": target_id,
            "details": details,
        },
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256((prev_hash + body).encode()).hexdigest()


def record(
    db: Session,
    *,
    org_id: uuid.UUID,
    actor_id: uuid.UUID | None,
    action: str,
    target_type: str | None = None,
    target_id=None,
    details: dict | None = None,
) -> AuditEvent:
    """Append one event. Never put memory content or secrets in `details` (ids, counts, reasons)."""
    details = json.loads(json.dumps(details or {}, default=str))
    repo.lock_chain(db, org_id)
    last = repo.head(db, org_id)
    seq, prev = (last.seq + 1, last.hash) if last else (1, GENESIS)
    at = datetime.now(UTC)
    tid = str(target_id) if target_id is not None else None
    digest = _digest(prev, org_id, seq, at, actor_id, action, target_type=target_type, target_id=tid, details=details)
    key = db.info.get("audit_key")
    ev = AuditEvent(
        org_id=org_id,
        seq=seq,
        at=at,
        actor_id=actor_id,
        action=action,
        target_type=target_type,
        target_id=tid,
        details=details,
        prev_hash=prev,
        hash=digest,
        mac=mac_hex(key, digest) if key else None,
    )
    db.add(ev)
    db.flush()
    return ev


def verify_window(
    db: Session, org_id: uuid.UUID, key: bytes | None = None, *, since_seq: int = 1, limit: int | None = None
) -> tuple[int, AuditEvent | None, str | None]:
    """Check up to `limit` events from `since_seq` on: (events checked, first broken event or None,
    why it is broken). Each event's hash is recomputed from its fields and must chain to the
    stored hash of the event before it (the window's first: the stored hash at `since_seq` - 1).
    With `key`, seals are checked too: once an org has a sealed event, every later one must carry
    a valid seal (for a window, whether one came before it is read from the events before)."""
    prev = GENESIS if since_seq <= 1 else repo.hash_at(db, org_id, since_seq - 1)
    if prev is None:  # the window starts past the chain's head: nothing to check
        return 0, None, None
    sealed = key is not None and since_seq > 1 and repo.sealed_before(db, org_id, since_seq)
    n = 0
    for ev in repo.chain(db, org_id, since_seq=since_seq, limit=limit):
        n += 1
        expect = _digest(
            prev,
            ev.org_id,
            ev.seq,
            ev.at,
            ev.actor_id,
            ev.action,
            target_type=ev.target_type,
            target_id=ev.target_id,
            details=ev.details,
        )
        if ev.seq != since_seq - 1 + n:
            return n, ev, f"sequence gap: expected seq {since_seq - 1 + n}"
        if ev.prev_hash != prev:
            return n, ev, "prev_hash is not the hash of the event before"
        if ev.hash != expect:
            return n, ev, "hash does not match the event's fields"
        if key is not None:
            if ev.mac is not None:
                if not hmac.compare_digest(ev.mac, mac_hex(key, ev.hash)):
                    return n, ev, "invalid seal"
                sealed = True
            elif sealed:
                return n, ev, "unsealed event after sealed ones"
        prev = ev.hash
    return n, None, None


def verify_chain(db: Session, org_id: uuid.UUID, key: bytes | None = None) -> tuple[int, AuditEvent | None]:
    """Return (events checked, first broken event or None) over the whole chain (verify_window)."""
    n, broken, _ = verify_window(db, org_id, key)
    return n, broken


def _checkpoint_signature(key: bytes, org_id, seq: int, head: str) -> str:
    return mac_hex(key, f"checkpoint:{org_id}:{seq}:{head}")


def checkpoint(db: Session, org_id: uuid.UUID, key: bytes) -> dict:
    """The chain's head, signed: keep it where the service cannot write (a ticket, a WORM
    bucket); a later `verify` against it shows nothing before it was rewritten."""
    last = repo.head(db, org_id)
    seq, head = (last.seq, last.hash) if last else (0, GENESIS)
    return {"org": str(org_id), "seq": seq, "hash": head, "signature": _checkpoint_signature(key, org_id, seq, head)}


def checkpoint_mismatch(db: Session, org_id: uuid.UUID, cp: dict, key: bytes) -> str | None:
    """Why the chain no longer passes through checkpoint `cp` (None when it does)."""
    signed = hmac.compare_digest(cp["signature"], _checkpoint_signature(key, org_id, cp["seq"], cp["hash"]))
    at = repo.hash_at(db, org_id, cp["seq"])
    if at is None or at != cp["hash"] or not signed or cp["org"] != str(org_id):
        return f"checkpoint mismatch at seq {cp['seq']}" + (" (bad signature)" if not signed else "")
    return None


def events(
    db: Session, principal, *, actor, action, target_type, target_id, since, until, cursor: str | None, limit: int
) -> dict:
    """GET /v1/audit: one page of the caller's org's events (the endpoint checked the role)."""
    if cursor and not cursor.isdigit():
        raise BadRequest("cursor must be the next_cursor of a previous page", code="invalid_cursor")
    rows = repo.page(
        db,
        principal,
        actor=actor,
        action=action,
        target_type=target_type,
        target_id=target_id,
        since=since,
        until=until,
        after_seq=int(cursor) if cursor else None,
        limit=limit + 1,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    return {
        "events": [
            {
                "seq": e.seq,
                "at": e.at.isoformat(),
                "actor": str(e.actor_id) if e.actor_id else None,
                "action": e.action,
                "target_type": e.target_type,
                "target_id": e.target_id,
                "details": e.details,
                "prev_hash": e.prev_hash,
                "hash": e.hash,
            }
            for e in rows
        ],
        "next_cursor": str(rows[-1].seq) if more and rows else None,
    }


def verify(db: Session, principal, *, since_seq: int, limit: int, checkpoint_: dict | None) -> dict:
    """POST /v1/audit/verify: `memscale audit verify` over a window of the caller's org's chain, with
    the service's key (seals) and, when the window holds, an optional checkpoint (one lookup)."""
    key = db.info.get("audit_key")
    last = repo.head(db, principal.org_id)
    head_seq = last.seq if last else 0
    n, broken, reason = verify_window(db, principal.org_id, key, since_seq=since_seq, limit=limit)
    first_broken = {"seq": broken.seq, "reason": reason} if broken is not None else None
    if first_broken is None and checkpoint_ is not None:
        if key is None:
            raise BadRequest("this service holds no audit key to check a checkpoint with", code="no_audit_key")
        mismatch = checkpoint_mismatch(db, principal.org_id, checkpoint_, key)
        if mismatch:
            first_broken = {"seq": checkpoint_["seq"], "reason": mismatch}
    return {
        "ok": first_broken is None,
        "checked": n,
        "from_seq": since_seq,
        "to_seq": since_seq - 1 + n,
        "head_seq": head_seq,
        "first_broken": first_broken,
    }
