"""Episodes: append-only traces. Services flush; the request commits."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.episodes import repository as repo
from app.episodes.models import Episode
from app.episodes.schemas import EpisodeIn, EpisodeOut
from app.kit.embedding import Embedder
from app.kit.access import assert_may_modify
from app.kit.errors import NotFound


def to_out(e: Episode) -> EpisodeOut:
    return EpisodeOut(id=e.id, kind=e.kind, content=e.content, messages=e.messages, session_id=e.session_id,
                      outcome=e.outcome, metadata=e.metadata_, occurred_at=e.occurred_at, created_at=e.created_at,
                      visibility=e.visibility, groups=e.groups, labels=e.labels, owner_id=e.owner_id)


def embed_text(item: EpisodeIn) -> str:
    return item.content


def embed_all(embedder: Embedder, items: list[EpisodeIn]) -> list:
    return embedder.embed([embed_text(i) for i in items])


def create_many(db: Session, embedder: Embedder, principal: Principal, items: list[EpisodeIn],
                *, owner_id: uuid.UUID | None = None, audit: bool = True, vectors: list | None = None) -> list[Episode]:
    """All or nothing: embeddings first (no lock held; `vectors` if the caller computed them),
    then one flush in the caller's transaction."""
    vectors = vectors if vectors is not None else embed_all(embedder, items)
    now = datetime.now(timezone.utc)
    rows = [
        Episode(id=uuid.uuid4(), org_id=principal.org_id, owner_id=owner_id or principal.user_id, kind=i.kind,
                content=i.content, messages=[m.model_dump(mode="json") for m in i.messages] if i.messages else None,
                session_id=i.session_id, outcome=i.outcome, metadata_=i.metadata, occurred_at=i.occurred_at or now,
                created_at=now, visibility=i.visibility, groups=i.groups, labels=i.labels, embedding=v)
        for i, v in zip(items, vectors)
    ]
    repo.add_all(db, rows)
    if audit:
        record(db, org_id=principal.org_id, actor_id=principal.user_id, action="episode.create",
               target_type="episode", target_id=rows[0].id if len(rows) == 1 else None,
               details={"count": len(rows), "ids": [str(r.id) for r in rows][:1000]})
    return rows


def get(db: Session, principal: Principal, episode_id: uuid.UUID) -> Episode:
    ep = repo.get_visible(db, principal, episode_id)
    if ep is None:
        raise NotFound("episode not found")
    return ep


def assert_can_delete(principal: Principal, ep: Episode) -> None:
    assert_may_modify(principal, ep, "episode")
