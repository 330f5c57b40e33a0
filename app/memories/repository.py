from __future__ import annotations

import uuid

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.episodes.models import Episode
from app.kit.access import visible_to
from app.knowledge.models import Chunk, KnowledgeAsset
from app.memories.models import Memory

SOURCE_MODELS = {"episode": Episode, "memory": Memory, "chunk": Chunk, "asset": KnowledgeAsset}


def get_visible(db: Session, principal: Principal, memory_id: uuid.UUID, *, for_update: bool = False) -> Memory | None:
    stmt = select(Memory).where(Memory.id == memory_id, visible_to(principal, Memory))
    if for_update:
        stmt = stmt.with_for_update()
    return db.execute(stmt).scalar_one_or_none()


def visible_sources(db: Session, principal: Principal, type_: str, ids: list[uuid.UUID]) -> list:
    model = SOURCE_MODELS[type_]
    return list(db.execute(select(model).where(model.id.in_(ids), visible_to(principal, model))).scalars())


def delete_root(db: Session, org_id: uuid.UUID, root_id: uuid.UUID) -> list[uuid.UUID]:
    ids = list(db.execute(delete(Memory).where(Memory.org_id == org_id, Memory.root_id == root_id)
                          .returning(Memory.id)).scalars())
    return ids
