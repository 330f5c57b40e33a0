"""Every statement about an org's embedding model, its re-embedding and the staged vectors.

The item tables are read and written here through their models (as search does): a re-embedding
reaches every row of the org, in every branch and every memory version, whatever its scope (the
job's transactions see every scope and branch)."""

from __future__ import annotations

import uuid

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from app.embedders.models import OrgEmbedder, Reembedding, StagedVector
from app.episodes.models import Episode
from app.kit.items import CHUNK, EPISODE, MEMORY
from app.knowledge.models import Chunk
from app.memories.models import Memory
from app.search.models import Lexeme

# item type -> (model, key column, text column, staging reference column)
# (every table with a vector column: the three embedded item types and the org's vocabulary)
LEXEME = "lexeme"
ITEMS = {
    EPISODE: (Episode, Episode.id, Episode.content, StagedVector.episode_id),
    MEMORY: (Memory, Memory.id, Memory.text, StagedVector.memory_id),
    CHUNK: (Chunk, Chunk.id, Chunk.text, StagedVector.chunk_id),
    LEXEME: (Lexeme, Lexeme.lexeme, Lexeme.word, StagedVector.lexeme),
}
_LOCK = "SELECT {fn}(hashtextextended(:k, 13))"


def lock_shared(db: Session, org_id: uuid.UUID) -> None:
    """The org's embedder lock in share mode, to the end of the transaction: every write of a
    vector and every ranking holds it, so the switch (exclusive) never falls between a model's
    check and the commit it guards."""
    db.execute(text(_LOCK.format(fn="pg_advisory_xact_lock_shared")), {"k": f"embedder:{org_id}"})


def try_lock_exclusive(db: Session, org_id: uuid.UUID) -> bool:
    return bool(db.execute(text(_LOCK.format(fn="pg_try_advisory_xact_lock")), {"k": f"embedder:{org_id}"}).scalar())


def lock_exclusive(db: Session, org_id: uuid.UUID) -> None:
    db.execute(text(_LOCK.format(fn="pg_advisory_xact_lock")), {"k": f"embedder:{org_id}"})


def identity(db: Session, org_id: uuid.UUID) -> OrgEmbedder | None:
    return db.get(OrgEmbedder, org_id, populate_existing=True)


def record(db: Session, org_id: uuid.UUID, model: str, dim: int) -> None:
    stmt = insert(OrgEmbedder).values(org_id=org_id, model=model, dim=dim)
    db.execute(stmt.on_conflict_do_update(index_elements=["org_id"], set_={"model": model, "dim": dim, "updated_at": func.now()}))


def run_of(db: Session, org_id: uuid.UUID, *, for_update: bool = False) -> Reembedding | None:
    return db.get(Reembedding, org_id, with_for_update=for_update, populate_existing=True)


def start_run(db: Session, org_id: uuid.UUID, model: str, dim: int, job_id: uuid.UUID | None) -> Reembedding:
    run = Reembedding(org_id=org_id, model=model, dim=dim, job_id=job_id, done=0, total=0)
    db.add(run)
    db.flush()
    return run


def end_run(db: Session, org_id: uuid.UUID) -> None:
    db.execute(delete(StagedVector).where(StagedVector.org_id == org_id))
    db.execute(delete(Reembedding).where(Reembedding.org_id == org_id))


def missing(db: Session, org_id: uuid.UUID, item: str, after: str | None, limit: int) -> list[tuple[str, str]]:
    """(key, text) of up to `limit` rows of `item` with no staged vector yet, in key order after
    `after`: a pass walks the table once; the rows it passed that were written meanwhile are
    found by the next pass (from the start)."""
    model, key, txt, ref = ITEMS[item]
    staged = select(StagedVector.org_id).where(StagedVector.org_id == org_id, StagedVector.item_type == item, ref == key)
    stmt = select(key, txt).where(model.org_id == org_id, ~staged.exists())
    if after is not None:
        stmt = stmt.where(key > (uuid.UUID(after) if item != LEXEME else after))
    rows = db.execute(stmt.order_by(key).limit(limit)).all()
    return [(str(k), t or "") for k, t in rows]


def stage(db: Session, org_id: uuid.UUID, item: str, keys: list[str], vectors) -> None:
    if not keys:
        return
    ref = ITEMS[item][3].key
    rows = [
        {"org_id": org_id, "item_type": item, "item_key": k, ref: (k if item == LEXEME else uuid.UUID(k)), "embedding": v}
        for k, v in zip(keys, vectors)
    ]
    db.execute(insert(StagedVector).values(rows).on_conflict_do_nothing(index_elements=["org_id", "item_type", "item_key"]))


def counts(db: Session, org_id: uuid.UUID) -> tuple[int, int]:
    """(vectors staged, rows that need one) over the org's four vector tables."""
    done = db.execute(select(func.count()).where(StagedVector.org_id == org_id)).scalar_one()
    total = sum(db.execute(select(func.count()).where(m.org_id == org_id)).scalar_one() for m, *_ in ITEMS.values())
    return done, total


def set_progress(db: Session, org_id: uuid.UUID, done: int, total: int) -> None:
    db.execute(update(Reembedding).where(Reembedding.org_id == org_id).values(done=done, total=total))


def copy_staged(db: Session, org_id: uuid.UUID) -> int:
    """Every staged vector into its row's embedding column; how many rows it set."""
    n = 0
    for item, (model, key, _, ref) in ITEMS.items():
        res = db.execute(
            update(model)
            .where(model.org_id == org_id, StagedVector.org_id == org_id, StagedVector.item_type == item, key == ref)
            .values(embedding=StagedVector.embedding)
            .execution_options(synchronize_session=False)
        )
        n += res.rowcount
    return n


def set_vectors(db: Session, org_id: uuid.UUID, item: str, keys: list[str], vectors) -> None:
    """Rows' embeddings set in place (a write that embedded with a model the org left meanwhile)."""
    model, key, _, _ = ITEMS[item]
    for k, v in zip(keys, vectors):
        kv = k if item == LEXEME else uuid.UUID(str(k))
        db.execute(
            update(model)
            .where(model.org_id == org_id, key == kv)
            .values(embedding=v)
            .execution_options(synchronize_session=False)
        )


def texts_of(db: Session, org_id: uuid.UUID, item: str, keys: list) -> dict[str, str]:
    model, key, txt, _ = ITEMS[item]
    vals = [k if item == LEXEME else uuid.UUID(str(k)) for k in keys]
    return {str(k): t or "" for k, t in db.execute(select(key, txt).where(model.org_id == org_id, key.in_(vals)))}


def vectors_of(db: Session, org_id: uuid.UUID, item: str) -> list[tuple[str, str, list[float]]]:
    """(key, text, embedding) of every row of `item` (tests and the benchmark compare them)."""
    model, key, txt, _ = ITEMS[item]
    return [(str(k), t, e) for k, t, e in db.execute(select(key, txt, model.embedding).where(model.org_id == org_id))]


def recorded(db: Session) -> bool:
    """Whether the database records models (migration 0027 and later; the scale bench measures
    layouts migrated below it, whose vectors are all the configured model's)."""
    return db.execute(text("SELECT to_regclass('org_embedders') IS NOT NULL")).scalar_one()


def mismatches(db: Session, configured: str) -> list[tuple[str, str, str | None]]:
    """(org name, its model, the model a re-embedding under way switches it to) of every org whose
    model is not `configured`, through a function that shows nothing else of any org."""
    if not recorded(db):
        return []
    rows = db.execute(text("SELECT org_name, model, reembedding FROM memscale_embedder_mismatches(:m)"), {"m": configured})
    return [tuple(r) for r in rows]
