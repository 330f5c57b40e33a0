"""Statements over episodes (and the one session check episode writes need)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime

import numpy as np
from sqlalchemy import bindparam, delete, func, select, text, tuple_, update
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.episodes.models import Episode
from app.kit.database.db import view_of
from app.kit.database.vectors import PackedVector
from app.kit.http.listing import ItemFilters
from app.kit.http.repository_listing import item_terms, keyset
from app.kit.tenancy.access import visible_to
from app.kit.tenancy.repository_view import in_layer, in_view


def get_visible(db: Session, principal: Principal, episode_id: uuid.UUID) -> Episode | None:
    return db.execute(select(Episode).where(Episode.id == episode_id, visible_to(principal, Episode))).scalar_one_or_none()


def page_visible(db: Session, principal: Principal, f: ItemFilters) -> list[Episode]:
    """One keyset page of the episodes the principal may see (`since`/`until` on when they happened)."""
    stmt = select(Episode).where(visible_to(principal, Episode), *item_terms(Episode, f, Episode.occurred_at))
    return list(db.execute(keyset(stmt, Episode, f)).scalars())


def add_all(db: Session, episodes: list[Episode]) -> None:
    db.add_all(episodes)
    db.flush()


_COLUMNS = [a.key for a in Episode.__mapper__.column_attrs if a.key != "tsv"]


_NAMES = {k: Episode.__mapper__.column_attrs[k].columns[0].name for k in _COLUMNS}
# The embedding goes out in pgvector's binary form (app/kit/database/vectors.py), not printed as text.
_INSERT = Episode.__table__.insert().values(embedding=bindparam("embedding_packed", type_=PackedVector()))


def insert(db: Session, episodes: list[Episode]) -> None:
    """New episodes in one statement (multi-row VALUES), not one ORM flush each: no identity map
    and nothing read back (every value is set; `tsv` is computed by the table). The objects stay
    outside the session, complete for a reply."""
    if episodes:
        db.execute(_INSERT, [_values(e) for e in episodes])


def _values(e: Episode) -> dict:
    out = {_NAMES[k]: getattr(e, k) for k in _COLUMNS if k != "embedding"}
    out["embedding_packed"] = e.embedding
    return out


_STAGING = "episodes_import"


def copy_in(db: Session, episodes: list[Episode]) -> None:
    """Many new episodes: COPY into a staging table (dropped at commit), then one INSERT ... SELECT,
    so the rows cross the socket in COPY's stream and the table's indexes and row-level policies
    see one statement. Every value is set, as for `insert`."""
    if not episodes:
        return
    cols = [Episode.__mapper__.column_attrs[k].columns[0].name for k in _COLUMNS]
    listed = ", ".join(cols)
    db.execute(text(f"CREATE TEMP TABLE {_STAGING} ON COMMIT DROP AS SELECT {listed} FROM episodes WITH NO DATA"))
    raw = db.connection().connection.driver_connection  # psycopg: the session's own transaction
    with raw.cursor() as cur, cur.copy(f"COPY {_STAGING} ({listed}) FROM STDIN") as copy:
        for e in episodes:
            copy.write_row([_copy_value(getattr(e, k)) for k in _COLUMNS])
    db.execute(text(f"INSERT INTO episodes ({listed}) SELECT {listed} FROM {_STAGING}"))
    db.execute(text(f"DROP TABLE {_STAGING}"))


def _copy_value(v):
    """A value in COPY's text form where psycopg has no dumper for it (JSON, a vector)."""
    if isinstance(v, (dict, list)) and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
        return json.dumps(v)
    if isinstance(v, np.ndarray):
        return vector_text(v)
    return v


def vector_text(v) -> str:
    """A vector in pgvector's text form with each float32 written as a hexadecimal float
    (`0x1.8p-3`): pgvector reads its elements with C's `strtof`, which takes that form exactly,
    and Python writes it several times faster than the shortest decimal (numpy's `astype(str)`)."""
    return "[" + ",".join(map(float.hex, np.asarray(v, dtype=np.float32).tolist())) + "]"


def hard_delete(db: Session, org_id: uuid.UUID, episode_id: uuid.UUID, *, branch: uuid.UUID | None = None) -> None:
    """Remove the row (`branch`: only if that branch wrote it)."""
    stmt = delete(Episode).where(Episode.org_id == org_id, Episode.id == episode_id)
    db.execute(stmt if branch is None else stmt.where(Episode.branch_id == branch))


def sessions_not_owned_by(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID, ids: set[uuid.UUID]) -> list[uuid.UUID]:
    """Which of these ids are sessions of the org owned by someone else (ids only; sessions are
    private, so the check looks past the caller's row-level scope)."""
    from app.kit.database.db import every_scope
    from app.sessions.models import AgentSession

    with every_scope(db):
        return list(
            db.execute(
                select(AgentSession.id).where(
                    AgentSession.org_id == org_id, AgentSession.id.in_(ids), AgentSession.owner_id != owner_id
                )
            ).scalars()
        )


def ids_owned_by(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID) -> list[uuid.UUID]:
    return list(db.execute(select(Episode.id).where(Episode.org_id == org_id, Episode.owner_id == owner_id)).scalars())


def _before(org_id: uuid.UUID, cutoff: datetime) -> list:
    """The episodes a retention rule removes: those of the org that happened before `cutoff`."""
    return [Episode.org_id == org_id, Episode.occurred_at < cutoff]


def ids_before(db: Session, org_id: uuid.UUID, cutoff: datetime, limit: int) -> list[uuid.UUID]:
    """Up to `limit` episodes that happened before `cutoff` (retention)."""
    return list(db.execute(select(Episode.id).where(*_before(org_id, cutoff)).limit(limit)).scalars())


def count_before(db: Session, org_id: uuid.UUID, cutoff: datetime) -> int:
    """How many episodes happened before `cutoff` (what retention would remove)."""
    return db.execute(select(func.count()).select_from(Episode).where(*_before(org_id, cutoff))).scalar_one()


def _after(db: Session, org_id: uuid.UUID, position: dict, before: datetime) -> list:
    """Episodes stored after a pipeline's watermark `position` ({at, id}) and before `before`."""
    conds = [Episode.org_id == org_id, Episode.created_at < before, in_view(view_of(db), Episode)]
    if position.get("at"):
        at, id_ = datetime.fromisoformat(position["at"]), uuid.UUID(position["id"])
        conds.append(tuple_(Episode.created_at, Episode.id) > tuple_(at, id_))
    return conds


def batch_after(db: Session, org_id: uuid.UUID, position: dict, before: datetime, limit: int) -> list[Episode]:
    return list(
        db.execute(
            select(Episode).where(*_after(db, org_id, position, before)).order_by(Episode.created_at, Episode.id).limit(limit)
        ).scalars()
    )


def count_after(db: Session, org_id: uuid.UUID, position: dict, before: datetime) -> int:
    return db.execute(select(func.count()).select_from(Episode).where(*_after(db, org_id, position, before))).scalar_one()


def set_quality(db: Session, org_id: uuid.UUID, episode_id: uuid.UUID, quality: str, *, branch: uuid.UUID | None) -> None:
    db.execute(
        update(Episode)
        .where(Episode.org_id == org_id, Episode.id == episode_id, in_layer(Episode, branch))
        .values(quality=quality)
    )
