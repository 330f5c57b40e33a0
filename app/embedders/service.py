"""An org's embedding model: which one serves it, the check a process makes at start-up, the
check a writer makes before its commit, and the re-embedding that moves an org to another model
(staged in batches, switched in one transaction).

The switch is one transaction in two phases. First, without the org's embedder lock (every
ranking and every vector write holds it in share mode), the rows still without a staged vector
are embedded and every staged vector is moved into its row: row locks only, invisible to every
other transaction until the commit, so searches keep ranking the old vectors and writers keep
writing. Then, with the lock exclusive, only what changed meanwhile is done: the rows written
since (embedded now), the rows the copy skipped because a writer held them, the org's model set.
A reader sees every vector of the old model or every vector of the new one.

A writer that holds the lock in share mode and waits for a row the copy locked would wait for
the switch while the switch waits for its lock: the switch never waits for that lock while such
a writer exists, it gives way (SwitchBusy: the caller rolls back and tries again); the last try
takes the lock before touching any row, as a switch under steady conflicting writes must end."""

from __future__ import annotations

import time
import uuid
from datetime import datetime

from sqlalchemy.orm import Session

from app.embedders import repository as repo
from app.kit.database import replicas
from app.kit.database.base import EMBEDDING_DIM
from app.kit.errors import AppError, Conflict

BATCH = 32  # rows embedded and committed together: a kill loses at most one batch's work
SWITCH_TRY_S = 5.0  # the switch asks for its lock without queueing first, so readers do not wait behind it
POLL_S = 0.05


class SwitchBusy(Exception):
    """The switch gave way to a writer (see the module): roll its transaction back and try again."""


class EmbedderMismatch(AppError):
    """A process configured with one model over orgs whose vectors come from another."""

    status_code, code = 503, "embedder_mismatch"


_RECORDING: set[str] = set()  # databases known to record models (checked once each)


def records_models(db: Session) -> bool:
    """Whether `db`'s database records each org's model (revision 0027 on). Below it (the scale
    bench's layouts migrated down for comparison) every vector is the configured model's."""
    key = str(db.get_bind().url)
    if key not in _RECORDING and repo.recorded(db):
        _RECORDING.add(key)
    return key in _RECORDING


def serving_model(db: Session, org_id: uuid.UUID, *, default: str) -> str:
    if not records_models(db):
        return default
    repo.lock_shared(db, org_id)
    ident = repo.identity(db, org_id)
    return ident.model if ident is not None else default


def same_model_on_standby(primary_db: Session, standby_db: Session, principal) -> bool:
    """A standby read may rank the org's vectors only when the standby's model for the org is
    the primary's (which the request read, under the org's lock, to embed its question): a
    switch the standby has not replayed yet sends the read to the primary. Both read in their
    transaction's snapshot, the standby's the same as its ranking's."""
    if principal.org_id is None or not records_models(primary_db):
        return True
    primary = repo.model_of(primary_db, principal.org_id)
    standby = repo.model_of(standby_db, principal.org_id)  # None: the org is not there yet, nor its vectors
    return primary is None or standby is None or primary == standby


replicas.require(same_model_on_standby)


def hold(db: Session, org_id: uuid.UUID) -> None:
    """The org's embedder lock in share mode for a transaction that copies stored vectors (a
    branch's promotion): the switch cannot fall between reading a vector and storing its copy."""
    repo.lock_shared(db, org_id)


def record_org(db: Session, org_id: uuid.UUID, model: str, dim: int) -> None:
    repo.record(db, org_id, model, dim)


def dimension_of(model: str, settings) -> int:
    """The dimension `model`'s vectors have, without loading it: the bundled local models' own,
    any provider's the configured `MEMSCALE_EMBEDDING_DIM`."""
    from app.kit.runtime.embedding import E5_EMBEDDING, LOCAL_EMBEDDING

    return EMBEDDING_DIM if model in (LOCAL_EMBEDDING, E5_EMBEDDING) else settings.embedding_dim


def check_model(model: str, settings) -> None:
    """A 422 for a model whose vectors the schema cannot hold, before anything starts."""
    check_dimension(model, dimension_of(model, settings))


def check_params(params) -> None:
    """The reembed job kind's check at creation (app/jobs/kinds.py): its model fits the schema."""
    from app.config import Settings

    check_model(params.model, Settings())


def check_dimension(model: str, dim: int) -> None:
    if dim != EMBEDDING_DIM:
        raise AppError(
            f"{model} makes {dim}-dimensional vectors; the schema stores vector({EMBEDDING_DIM}): changing the dimension"
            " needs a migration of the vector columns and their indexes (README, 'Changing the embedder')",
            code="dimension_change",
            status_code=422,
        )


def check_start(db: Session, configured: str) -> None:
    """Refuse to serve (EmbedderMismatch) when an org's vectors are of another model than the
    configured one, unless that org's re-embedding to the configured model is under way (it is
    served with its old model until the switch)."""
    bad = [(org, model) for org, model, target in repo.mismatches(db, configured) if target != configured]
    if bad:
        lines = [
            f"org {org!r} holds vectors of {model}, this process is configured with {configured}:"
            f" run `memscale admin reembed --org {org} --model {configured}` (or set MEMSCALE_EMBEDDING_MODEL={model})"
            for org, model in bad
        ]
        raise EmbedderMismatch("refusing to start: " + "; ".join(lines))


def settle(db: Session, org_id: uuid.UUID, embedder, written: dict[str, list]) -> None:
    """A writer's check before its commit, under the org's lock in share mode: if the model it
    embedded `written` ({item type: [key, ...]}) with is no longer the org's (the org switched
    meanwhile), those rows are embedded again with the org's model now. Costs one lock and one
    key read when nothing changed."""
    if not any(written.values()):
        return
    fresh = _switched(db, org_id, embedder)
    if fresh is None:
        return
    for item, keys in written.items():
        texts = repo.texts_of(db, org_id, item, keys)
        ks = list(texts)
        if ks:
            repo.set_vectors(db, org_id, item, ks, fresh.embed([texts[k] for k in ks]))


def recheck(db: Session, org_id: uuid.UUID, embedder, texts: list[str], vectors):
    """The same check for a writer that embedded in an earlier transaction and has not written
    yet (a pipeline's batch): (the embedder, the vectors) to compare and store in this one,
    made again with the org's model if it switched meanwhile."""
    fresh = _switched(db, org_id, embedder)
    if fresh is None:
        return embedder, vectors
    return fresh, (fresh.embed(texts) if texts else vectors)


def _switched(db: Session, org_id: uuid.UUID, embedder):
    """Under the org's lock in share mode: None while `embedder`'s model is still the org's, else
    the embedder of the org's model now (a 409 to retry when `embedder` belongs to no pool)."""
    pool = getattr(embedder, "embedders", None)
    used = pool.model_of(embedder) if pool is not None else getattr(embedder, "model", None)
    current = serving_model(db, org_id, default=used)
    if used is None or current == used:
        return None
    if pool is None:
        raise Conflict("the org's embedding model changed during this write; retry it", code="embedder_switched")
    return pool.get(current)


# ---- the org's identity and its re-embedding, as the API shows them -------------------------


def describe(db: Session, org_id: uuid.UUID, *, default: str, default_dim: int) -> dict:
    ident = repo.identity(db, org_id)
    out = {"model": ident.model if ident else default, "dimensions": ident.dim if ident else default_dim}
    run = repo.run_of(db, org_id)
    if run is not None:
        out["reembedding"] = {"model": run.model, "done": run.done, "total": run.total, "started_at": run.started_at}
    return out


# ---- re-embedding ---------------------------------------------------------------------------


def begin(db: Session, org_id: uuid.UUID, model: str, dim: int, job_id: uuid.UUID | None) -> bool:
    """Start (or find) the org's re-embedding to `model`; False when the org already holds it
    and nothing is under way. A run to another model is a 409 (one at a time)."""
    check_dimension(model, dim)
    run = repo.run_of(db, org_id, for_update=True)
    if run is not None:
        if run.model != model:
            raise Conflict(f"a re-embedding to {run.model} is under way; it must finish first", code="reembedding_under_way")
        return True
    ident = repo.identity(db, org_id)
    if ident is not None and ident.model == model:
        return False
    repo.start_run(db, org_id, model, dim, job_id)
    return True


def stage_batch(db: Session, org_id: uuid.UUID, embedder, cursor: dict, limit: int = BATCH) -> int:
    """Embed and stage up to `limit` rows still without a new vector, walking the item types in
    turn from `cursor` ({"item": ..., "after": key}, updated); the run's progress is set in the
    same transaction. Returns how many rows it staged (0: this pass found nothing more)."""
    if repo.run_of(db, org_id, for_update=True) is None:  # one stager at a time; another one switched meanwhile
        cursor["item"] = "end"
        return 0
    items = list(repo.ITEMS)
    while cursor.get("item", items[0]) in items:
        item = cursor.get("item", items[0])
        rows = repo.missing(db, org_id, item, cursor.get("after"), limit)
        if rows:
            repo.stage(db, org_id, item, [k for k, _ in rows], embedder.embed([t for _, t in rows]))
            cursor["after"] = rows[-1][0]
            done, total = repo.counts(db, org_id)
            repo.set_progress(db, org_id, done, total)
            return len(rows)
        nxt = items.index(item) + 1
        cursor.clear()
        cursor["item"] = items[nxt] if nxt < len(items) else "end"
    return 0


def switch(
    db: Session, org_id: uuid.UUID, embedder, *, try_for_s: float = SWITCH_TRY_S, online: bool = True, after_copy=None
) -> dict:
    """The switch (see the module), in the caller's transaction. `online`: copy before taking the
    org's exclusive lock (SwitchBusy when it must give way); otherwise take the lock first and do
    everything under it. `after_copy`: called once the copy and its catch-up are done, before
    the lock is asked for (tests). Its stats say how long it held the org's exclusive lock before its commit
    (`switch_locked_s`): what the org's writes and searches waited."""
    run = repo.run_of(db, org_id, for_update=True)
    if run is None:
        return {"switched": False}
    started = time.monotonic()
    caught_up = copied = 0
    if online:
        caught_up = _stage_missing(db, org_id, embedder)
        copied = repo.copy_staged(db, org_id, locked="skip")
        # the rows written while it copied, still without the lock: what is left for the lock
        # is what is written while these are embedded
        caught_up += _stage_missing(db, org_id, embedder, not_ours="skip")
        if after_copy is not None:
            after_copy()
        copy_s = time.monotonic() - started
        _lock_giving_way(db, org_id, try_for_s)
    else:
        copy_s = 0.0
        _lock_queueing(db, org_id, try_for_s)
    locked_at = time.monotonic()
    try:
        late = _stage_missing(db, org_id, embedder, not_ours="nowait" if online else None)
        late_copied = repo.copy_staged(db, org_id, locked="nowait" if online else "wait")
    except repo.RowsBusy as e:  # a row another transaction holds: never wait for it holding the lock
        raise SwitchBusy(f"a {e} row is locked by another transaction") from e
    repo.record(db, org_id, run.model, run.dim)
    repo.end_run(db, org_id)
    return {
        "switched": True,
        "model": run.model,
        "copied": copied + late_copied,
        "copied_before_lock": copied,
        "copied_under_lock": late_copied,
        "caught_up_at_switch": caught_up + late,
        "caught_up_under_lock": late,
        "switch_copy_s": round(copy_s, 3),
        "switch_locked_s": round(time.monotonic() - locked_at, 3),
    }


def _stage_missing(db: Session, org_id: uuid.UUID, embedder, *, not_ours: str | None = None) -> int:
    """Embed and stage every row still without a staged vector (`not_ours`: but the rows this
    transaction already moved its vectors into, locked as `repo.missing` says)."""
    n = 0
    for item in repo.ITEMS:
        after = None
        while rows := repo.missing(db, org_id, item, after, 256, not_ours=not_ours):
            repo.stage(db, org_id, item, [k for k, _ in rows], embedder.embed([t for _, t in rows]))
            after, n = rows[-1][0], n + len(rows)
    return n


def _lock_queueing(db: Session, org_id: uuid.UUID, try_for_s: float) -> None:
    """The exclusive lock with no row of the org locked yet: asked without queueing for
    `try_for_s` (readers do not wait behind it), then queued for."""
    deadline = time.monotonic() + try_for_s
    while not repo.try_lock_exclusive(db, org_id):
        if time.monotonic() > deadline:
            repo.lock_exclusive(db, org_id)
            return
        time.sleep(POLL_S)


def _lock_giving_way(db: Session, org_id: uuid.UUID, try_for_s: float) -> None:
    """The exclusive lock while holding the copy's row locks: asked without queueing for
    `try_for_s`, then queued for in short waits (new readers queue behind each, so the ones
    holding the lock drain), for as long again. Before each wait, a share holder waiting for one
    of our rows makes it give way (SwitchBusy), and each wait is shorter than the server's
    deadlock_timeout: a writer that starts waiting for our rows after the check would only look
    for a deadlock once the wait is over, so no writer is ever cancelled as a deadlock's victim."""
    deadline = time.monotonic() + try_for_s
    wait_ms = max(10, min(200, repo.deadlock_timeout_ms(db) // 4))
    while not repo.try_lock_exclusive(db, org_id):
        if repo.share_holder_waits_for_us(db, org_id):
            raise SwitchBusy("a writer waits for a row the switch's copy locked")
        if time.monotonic() <= deadline:
            time.sleep(POLL_S)
        elif repo.lock_exclusive_within(db, org_id, wait_ms):
            return
        elif time.monotonic() > deadline + try_for_s:
            raise SwitchBusy("the org's embedder lock stayed held in share mode")


def abandon(db: Session, org_id: uuid.UUID) -> bool:
    """Drop the org's re-embedding and its staged vectors; the org keeps its model."""
    run = repo.run_of(db, org_id, for_update=True)
    if run is not None:
        repo.end_run(db, org_id)
    return run is not None


def run_state(db: Session, org_id: uuid.UUID) -> tuple[int, int, datetime | None]:
    run = repo.run_of(db, org_id)
    return (run.done, run.total, run.started_at) if run else (0, 0, None)
