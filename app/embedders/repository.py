"""Every statement about an org's embedding model, its re-embedding and the staged vectors.

The item tables are read and written here through their models (as search does): a re-embedding
reaches every row of the org, in every branch and every memory version, whatever its scope (the
job's transactions see every scope and branch)."""

from __future__ import annotations

import uuid
from contextlib import contextmanager

from sqlalchemy import delete, func, literal_column, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import OperationalError
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


def model_of(db: Session, org_id: uuid.UUID) -> str | None:
    return db.execute(select(OrgEmbedder.model).where(OrgEmbedder.org_id == org_id)).scalar_one_or_none()


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


class RowsBusy(Exception):
    """A row the switch must lock is locked by another transaction (it asked without waiting)."""


def _lock_not_available(e: OperationalError) -> bool:
    return getattr(e.orig, "sqlstate", None) == "55P03"  # lock_not_available (NOWAIT, lock_timeout)


@contextmanager
def _rows_busy(item: str):
    """A row lock asked without waiting and refused, as RowsBusy(item)."""
    try:
        yield
    except OperationalError as e:
        if _lock_not_available(e):
            raise RowsBusy(item) from e
        raise


def missing(
    db: Session, org_id: uuid.UUID, item: str, after: str | None, limit: int, *, not_ours: str | None = None
) -> list[tuple[str, str]]:
    """(key, text) of up to `limit` rows of `item` with no staged vector yet, in key order after
    `after`: a pass walks the table once; the rows it passed that were written meanwhile are
    found by the next pass (from the start). `not_ours`: leave out the rows this transaction
    updated (the switch's copy, which drops the staged vectors it moves into their rows), and
    lock the rows found: "skip" the ones another transaction holds, or "nowait" (RowsBusy)."""
    model, key, txt, ref = ITEMS[item]
    staged = select(StagedVector.org_id).where(StagedVector.org_id == org_id, StagedVector.item_type == item, ref == key)
    stmt = select(key, txt).where(model.org_id == org_id, ~staged.exists())
    if not_ours:  # never waited for: the switch holds the copy's row locks, or the org's lock
        stmt = stmt.where(literal_column(f"{model.__tablename__}.xmin <> pg_current_xact_id()::xid"))
        stmt = stmt.with_for_update(read=True, key_share=True, nowait=not_ours == "nowait", skip_locked=not_ours == "skip")
    if after is not None:
        stmt = stmt.where(key > (uuid.UUID(after) if item != LEXEME else after))
    with _rows_busy(item):
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


# Every staged vector of one item type moved into its row: the rows are locked first (skipping
# or refusing the ones another transaction holds, as asked), their staged vectors deleted and
# written into them, in one statement. What is left staged afterwards is what was not copied.
_MOVE = """
WITH locked AS (
    SELECT t.{key} FROM {table} t
    WHERE t.org_id = :org AND EXISTS (
        SELECT 1 FROM embedding_staging s WHERE s.org_id = :org AND s.item_type = :item AND s.{ref} = t.{key})
    FOR NO KEY UPDATE OF t {mode}
), moved AS (
    DELETE FROM embedding_staging s USING locked
    WHERE s.org_id = :org AND s.item_type = :item AND s.{ref} = locked.{key}
    RETURNING s.{ref} AS k, s.embedding
)
UPDATE {table} t SET embedding = moved.embedding FROM moved WHERE t.org_id = :org AND t.{key} = moved.k
"""
_MODES = {"wait": "", "skip": "SKIP LOCKED", "nowait": "NOWAIT"}


def copy_staged(db: Session, org_id: uuid.UUID, *, locked: str = "wait") -> int:
    """Move staged vectors into their rows' embedding column (the staging rows moved are
    deleted); how many rows it set. `locked`: what to do with a row another transaction holds:
    "wait" for it, "skip" it (its vector stays staged), or "nowait" (RowsBusy, the transaction
    is then aborted)."""
    n = 0
    for item, (model, key, _, ref) in ITEMS.items():
        sql = _MOVE.format(table=model.__tablename__, key=key.key, ref=ref.key, mode=_MODES[locked])
        with _rows_busy(item):
            n += db.execute(text(sql), {"org": org_id, "item": item}).rowcount
    return n


# Whether a transaction that holds the org's embedder lock in share mode waits, directly or
# through others, for this one (for a row it locked): this transaction then cannot take the
# lock exclusively before giving its rows up.
_SHARE_HOLDER_WAITS = text("""
WITH RECURSIVE waiting(pid) AS (
    SELECT DISTINCT l.pid FROM pg_locks l WHERE NOT l.granted AND pg_backend_pid() = ANY (pg_blocking_pids(l.pid))
  UNION
    SELECT DISTINCT l.pid FROM pg_locks l JOIN waiting w ON w.pid = ANY (pg_blocking_pids(l.pid)) WHERE NOT l.granted
), k AS (SELECT hashtextextended(:k, 13) AS v)
SELECT EXISTS (
    SELECT 1 FROM pg_locks l JOIN waiting w ON w.pid = l.pid, k
    WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ShareLock' AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid::text::bigint = ((k.v >> 32) & 4294967295) AND l.objid::text::bigint = (k.v & 4294967295))
""")


def share_holder_waits_for_us(db: Session, org_id: uuid.UUID) -> bool:
    return bool(db.execute(_SHARE_HOLDER_WAITS, {"k": f"embedder:{org_id}"}).scalar())


def lock_exclusive_within(db: Session, org_id: uuid.UUID, ms: int) -> bool:
    """The org's embedder lock exclusive, queueing for it at most `ms` (new readers queue behind
    it meanwhile); False when it was not granted in time. The wait runs in a savepoint, so a
    timeout leaves the transaction and what it wrote as they were."""
    before = db.execute(text("SELECT current_setting('lock_timeout')")).scalar_one()
    sp = db.begin_nested()
    try:
        db.execute(text("SELECT set_config('lock_timeout', :v, true)"), {"v": f"{int(ms)}ms"})
        lock_exclusive(db, org_id)
        db.execute(text("SELECT set_config('lock_timeout', :v, true)"), {"v": before})
    except OperationalError as e:
        sp.rollback()  # the timeout, and the setting with it
        if _lock_not_available(e):
            return False
        raise
    sp.commit()
    return True


def deadlock_timeout_ms(db: Session) -> int:
    return int(db.execute(text("SELECT setting FROM pg_settings WHERE name = 'deadlock_timeout'")).scalar_one())


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
