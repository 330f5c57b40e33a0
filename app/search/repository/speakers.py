"""The speaker of pooled conversation turns: the name before the first colon of a turn's content
("Caroline: I went to the support group"), read for rows already in the caller's pool only."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.episodes.models import Episode
from app.kit.database.sql import among_bound, as_text
from app.search.repository.filters import SPEAKER, STATEMENTS, servable, shape
from app.search.schemas import SearchFilters


def speakers(db: Session, principal: Principal, f: SearchFilters, ids: list) -> dict[str, str]:
    """{id: speaker} of the servable turns among `ids` whose content starts with one."""
    if not ids:
        return {}

    def build():
        who = func.substring(Episode.content, SPEAKER)
        return select(as_text(Episode.id).label("id"), who.label("who")).where(
            among_bound(Episode.id, "ids"), who.is_not(None), *servable(principal, "episode", f)
        )

    rows = STATEMENTS.run(db, ("speakers",) + shape(principal, "episode", f), build, {"ids": list(ids)}).all()
    return {r.id: r.who.strip() for r in rows}
