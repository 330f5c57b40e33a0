"""Episodes: append-only traces. Services flush; the request commits."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.embedders.service import settle
from app.episodes import repository as repo
from app.episodes.feed import Feed
from app.episodes.models import Episode
from app.episodes.schemas import EpisodeIn, EpisodeOut, EpisodePage
from app.kit.database.db import released, view_of
from app.kit.errors import NotFound
from app.kit.http.listing import ItemFilters, next_cursor
from app.kit.runtime.embedding import Embedder
from app.kit.stages import stage
from app.kit.tenancy.access import assert_may_share
from app.lineage.service import add_edge
from app.search import lexicon


def to_out(e: Episode) -> EpisodeOut:
    return EpisodeOut(
        id=e.id,
        kind=e.kind,
        content=e.content,
        messages=e.messages,
        session_id=e.session_id,
        outcome=e.outcome,
        metadata=e.metadata_,
        occurred_at=e.occurred_at,
        created_at=e.created_at,
        visibility=e.visibility,
        groups=e.groups,
        labels=e.labels,
        owner_id=e.owner_id,
    )


def embed_text(item: EpisodeIn) -> str:
    return item.content


def embed_all(embedder: Embedder, items: list[EpisodeIn], who: str | None = None) -> list:
    """Embeddings of new episodes; with `who`, through the fair write lane (app/kit/runtime/fairness.py)."""
    texts = [embed_text(i) for i in items]
    if who is not None and hasattr(embedder, "embed_write"):
        return embedder.embed_write(who, texts)
    return embedder.embed(texts)


def vocabulary(db: Session, principal: Principal, items: list[EpisodeIn]) -> list[tuple[str, str]]:
    """The words of new episodes that the org's vocabulary lacks (app/search/lexicon.py): asked
    before the embedding, so that they are embedded with the episodes."""
    return lexicon.new_words(db, principal.org_id, [embed_text(i) for i in items])


def embed_vocabulary(embedder: Embedder, words: list[tuple[str, str]], who: str | None = None) -> list:
    return lexicon.embed_words(embedder, words, who)


def ingest(
    db: Session,
    embedder: Embedder,
    principal: Principal,
    items: list[EpisodeIn],
    *,
    endpoint: str,
    body,
    idempotency_key: str | None,
    ttl_s: int,
    reply: Callable[[list[Episode]], object],
):
    """POST /v1/episodes and /batch. The embeddings are made beside the storage (app/episodes/feed.py):
    the first slice with no pooled connection held, then the idempotency lock (held to the commit)
    and each slice stored while the next is embedded, all in the caller's transaction; `reply`
    makes the response. A replayed request stops embedding at once."""
    from app.kit.http import idempotency

    who = str(principal.user_id)
    with stage("validation"):
        check(db, principal, principal.user_id, items)
    with stage("vocabulary"):
        words = vocabulary(db, principal, items)
    feed = Feed(embedder, who, [embed_text(i) for i in items], words, lambda ws: embed_vocabulary(embedder, ws, who=who))
    try:
        with released(db, principal):
            feed.ready()
        with stage("idempotency"):
            return idempotency.idempotent(
                db,
                principal,
                idempotency_key,
                endpoint,
                body,
                lambda: reply(store(db, principal, items, feed, checked=True, embedder=embedder)),
                ttl_s=ttl_s,
            )
    finally:
        feed.close()


def create_many(
    db: Session,
    embedder: Embedder,
    principal: Principal,
    items: list[EpisodeIn],
    *,
    owner_id: uuid.UUID | None = None,
    audit: bool = True,
) -> list[Episode]:
    """All or nothing, in the caller's transaction, embedded inline (paths that hold no request of
    their own, such as a session's evicted messages); the org's vocabulary gains their new words."""
    check(db, principal, owner_id or principal.user_id, items)
    vectors = embed_all(embedder, items)
    words = embed_vocabulary(embedder, vocabulary(db, principal, items))
    pieces = [("words", words), ("items", (list(range(len(items))), vectors))]
    return store(db, principal, items, pieces, owner_id=owner_id, audit=audit, checked=True, embedder=embedder)


def store(
    db: Session,
    principal: Principal,
    items: list[EpisodeIn],
    pieces: Iterable[tuple[str, object]],
    *,
    owner_id: uuid.UUID | None = None,
    audit: bool = True,
    checked: bool = False,
    write_rows=repo.insert,
    action: str = "episode.create",
    on_progress: Callable[[int, int], None] | None = None,
    embedder=None,
) -> list[Episode]:
    """Check (unless `checked`), then write the episodes as their embeddings arrive (`pieces`: ("words", embedded new
    vocabulary) and ("items", (indices into `items`, vectors))): one `write_rows` per slice (a multi-row INSERT;
    the bulk import's COPY), one vocabulary statement, one audit event `action`. Nothing is committed here."""
    owner = owner_id or principal.user_id
    lexemes: list[str] = []
    if not checked:
        with stage("validation"):
            check(db, principal, owner, items)
    now, branch = datetime.now(UTC), view_of(db).branch_id
    rows: list[Episode | None] = [None] * len(items)
    for kind, value in pieces:
        if kind == "words":
            with stage("vocabulary.write"):
                lexicon.remember(db, principal.org_id, value)
            lexemes += [lex for (lex, _), _ in value]
            continue
        idx, vectors = value
        part = [new_row(principal, owner, items[i], v, now, branch) for i, v in zip(idx, vectors)]
        with stage("rows"):
            write_rows(db, part)
        for i, r in zip(idx, part):
            rows[i] = r
        if on_progress is not None:
            on_progress(sum(r is not None for r in rows), len(rows))
    if any(r is None for r in rows):
        raise RuntimeError("an episode of the write was not embedded")
    if embedder is not None:  # vectors of the model the org holds at the commit (app/embedders/service.py)
        settle(db, principal.org_id, embedder, {"episode": [r.id for r in rows], "lexeme": lexemes})
    if audit:
        with stage("audit"):
            record(
                db,
                org_id=principal.org_id,
                actor_id=principal.user_id,
                action=action,
                target_type="episode",
                target_id=rows[0].id if len(rows) == 1 else None,
                details={"count": len(rows), "ids": [str(r.id) for r in rows][:1000]},
            )
    return rows


def check(db: Session, principal: Principal, owner: uuid.UUID, items: list[EpisodeIn]) -> None:
    """What the API refuses before anything is embedded: a scope the caller may not share into, a
    session that is not the owner's."""
    for i in items:
        assert_may_share(principal, i.visibility, i.groups)
    _check_sessions(db, principal, owner, items)


def new_row(principal: Principal, owner: uuid.UUID, i: EpisodeIn, vector, now: datetime, branch) -> Episode:
    return Episode(
        id=uuid.uuid4(),
        org_id=principal.org_id,
        owner_id=owner,
        kind=i.kind,
        content=i.content,
        messages=[m.model_dump(mode="json") for m in i.messages] if i.messages else None,
        session_id=i.session_id,
        outcome=i.outcome,
        metadata_=i.metadata,
        occurred_at=i.occurred_at or now,
        created_at=now,
        visibility=i.visibility,
        groups=i.groups,
        labels=i.labels,
        embedding=vector,
        branch_id=branch,
    )


def _check_sessions(db: Session, principal: Principal, owner_id: uuid.UUID, items: list[EpisodeIn]) -> None:
    """An episode may name a memscale session (its id) only if the episode's owner owns it: a
    foreign session id would plant the episode in that user's session recall. Reads exactly like
    a session that does not exist."""
    ids = {sid for i in items if (sid := _session_uuid(i.session_id)) is not None}
    if ids and (foreign := repo.sessions_not_owned_by(db, principal.org_id, owner_id, ids)):
        raise NotFound(f"session {sorted(map(str, foreign))[0]} not found")


def _session_uuid(session_id: str | None) -> uuid.UUID | None:
    """The memscale session an episode names, if its session id is one (else an external id)."""
    try:
        return uuid.UUID(session_id) if session_id else None
    except ValueError:
        return None


def promote(db: Session, principal: Principal, e: Episode, *, branch: str) -> Episode:
    """A branch's episode copied into main (the transaction is bound to main): same content and
    scope, a new id, `promoted_from` lineage to the branch's row."""
    row = Episode(
        id=uuid.uuid4(),
        org_id=e.org_id,
        owner_id=e.owner_id,
        kind=e.kind,
        content=e.content,
        messages=e.messages,
        session_id=e.session_id,
        outcome=e.outcome,
        metadata_={**e.metadata_, "promoted_from": {"branch": branch, "id": str(e.id)}},
        occurred_at=e.occurred_at,
        created_at=datetime.now(UTC),
        visibility=e.visibility,
        groups=list(e.groups),
        labels=list(e.labels),
        embedding=e.embedding,
        branch_id=view_of(db).branch_id,
    )
    repo.add_all(db, [row])
    add_edge(db, org_id=e.org_id, from_type="episode", from_id=row.id, to_type="episode", to_id=e.id, relation="promoted_from")
    record(
        db,
        org_id=e.org_id,
        actor_id=principal.user_id,
        action="episode.promote",
        target_type="episode",
        target_id=row.id,
        details={"branch": branch, "from": str(e.id)},
    )
    return row


def get(db: Session, principal: Principal, episode_id: uuid.UUID) -> Episode:
    ep = repo.get_visible(db, principal, episode_id)
    if ep is None:
        raise NotFound("episode not found")
    return ep


def read(db: Session, principal: Principal, episode_id: uuid.UUID, read=None) -> Episode:
    """GET: the episode, read where `read` says, and recorded as read (app.lineage.service.read_one)."""
    from app.lineage.service import read_one

    return read_one(db, principal, "episode", lambda rdb: get(rdb, principal, episode_id), read)


def page(db: Session, principal: Principal, f: ItemFilters, read=None) -> EpisodePage:
    """A keyset page of the episodes the caller may see, recorded as a retrieval (it hands out content)."""
    from app.kit.database.replicas import on
    from app.lineage.service import record_listing

    rows = (read or on(db))(lambda rdb: repo.page_visible(rdb, principal, f))
    if rows:
        record_listing(db, principal, "episode", rows)
    return EpisodePage(items=[to_out(e) for e in rows], next_cursor=next_cursor(rows, f.limit))


# --- for pipelines (whole-org work: the job binds `all_scopes`) ---


def hard_delete(db: Session, org_id: uuid.UUID, episode_id: uuid.UUID, *, branch: uuid.UUID | None = None) -> None:
    """Remove the row (`branch`: only if that branch wrote it); erasure (app/erasure/) follows what
    was derived from it."""
    repo.hard_delete(db, org_id, episode_id, branch=branch)


def ids_owned_by(db: Session, org_id: uuid.UUID, owner_id: uuid.UUID) -> list[uuid.UUID]:
    return repo.ids_owned_by(db, org_id, owner_id)


def ids_before(db: Session, org_id: uuid.UUID, cutoff: datetime, limit: int) -> list[uuid.UUID]:
    return repo.ids_before(db, org_id, cutoff, limit)


def count_before(db: Session, org_id: uuid.UUID, cutoff: datetime) -> int:
    return repo.count_before(db, org_id, cutoff)


def batch_after(db: Session, org_id: uuid.UUID, position: dict, before: datetime, limit: int) -> list[Episode]:
    """The next `limit` episodes after a pipeline's watermark, in the order they were stored."""
    return repo.batch_after(db, org_id, position, before, limit)


def count_after(db: Session, org_id: uuid.UUID, position: dict, before: datetime) -> int:
    return repo.count_after(db, org_id, position, before)


def set_quality(db: Session, org_id: uuid.UUID, episode_id: uuid.UUID, quality: str) -> None:
    """Distillation's judgement: useful | skipped | quarantined (never served as context). In a
    branch only the branch's own episodes take it (a base episode is not the branch's to mark)."""
    repo.set_quality(db, org_id, episode_id, quality, branch=view_of(db).branch_id)
