"""What the org's retention rules will remove next: per rule, how many items the next `retention`
job would delete, counted by the predicate that job deletes by (counts only, never ids or content)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.episodes import service as episodes
from app.kit.database.db import every_scope
from app.kit.items import EPISODE
from app.orgs import service as orgs

# Per retained item type, how many of the org's items a rule's cutoff reaches (pipelines/retention.py
# deletes by the same functions' predicate).
_DUE = {EPISODE: episodes.count_before}


def rules(db: Session, principal: Principal, now: datetime | None = None) -> dict:
    """GET /v1/retention: the caller's org's rules, each with its cutoff and the items it would remove now.
    The job removes items whoever may see them and in every branch, so the count is over the whole
    org (every_scope); the items the cascade then re-derives or removes are not predicted."""
    now = now or datetime.now(UTC)
    out = []
    with every_scope(db):
        for item_type, days in sorted(orgs.retention_rules(db, principal.org_id).items()):
            cutoff = orgs.retention_cutoff(days, now)
            count = _DUE.get(item_type)
            out.append(
                {
                    "item_type": item_type,
                    "days": days,
                    "cutoff": cutoff.isoformat(),
                    "due": count(db, principal.org_id, cutoff) if count else None,
                }
            )
    return {"rules": out, "at": now.isoformat()}
