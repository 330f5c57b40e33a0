"""Bulk import of episodes (`memscale admin import FILE.jsonl`): one-off loads of many items.

The same rules as the API, for one named user as if it had posted every line: each line is an
episode body (app/episodes/schemas.py `EpisodeIn`), the user's right to share into each scope and
to name each session is checked, and the org's vocabulary gains the new words; nothing is written
unless every line passes (a bad line names its number). One embedding pass over every text,
longest first (batches of one length pad little), in chunks, starts while the lines are checked
and the vocabulary looked up (so that the model never waits on them); each chunk is COPYed into a staging
table and moved with one INSERT ... SELECT while the next chunk embeds, all in one transaction,
with the vocabulary in one statement and one audit event (`episode.import`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.episodes import repository as repo
from app.episodes.feed import Feed
from app.episodes.schemas import EpisodeIn
from app.episodes.service import check, embed_text, embed_vocabulary, store, vocabulary
from app.kit.database.db import released
from app.kit.errors import BadRequest
from app.kit.stages import stage

EMBED_CHUNK = 256  # texts per embedding call (one progress step)


def parse_lines(lines: Iterable[str]) -> list[EpisodeIn]:
    """Every non-blank line as an episode body; the first bad one refuses the whole import."""
    items = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            items.append(EpisodeIn.model_validate_json(line))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or "body"
            raise BadRequest(f"line {n}: {where}: {err.get('msg', 'invalid')}", code="invalid_import_line") from None
    if not items:
        raise BadRequest("nothing to import: the file holds no episode", code="empty_import")
    return items


def principal_of(db: Session, org_name: str, user_name: str) -> Principal:
    """The named user of the named org, as its API key would stand for it."""
    from app.orgs import service as orgs

    u = orgs.user_by_name(db, orgs.org_by_name(db, org_name), user_name)
    return Principal(
        org_id=u.org_id, user_id=u.id, name=u.name, roles=tuple(u.roles), groups=tuple(u.groups), clearances=tuple(u.clearances)
    )


def import_items(
    db: Session, embedder, principal: Principal, items: list[EpisodeIn], *, on_progress: Callable[[int, int], None] | None = None
) -> list[uuid.UUID]:
    """Embed, check and write in the caller's transaction (the caller commits): the model starts
    on the first chunk at once, while this thread checks the scopes and looks up the new
    vocabulary (embedded after that chunk); then each chunk of EMBED_CHUNK texts is COPYed in
    while the next one embeds (app/episodes/feed.py). A refused item stops the model after its
    chunk in progress and writes nothing. Returns the new ids in the order of `items`."""
    texts = [embed_text(i) for i in items]
    feed = Feed(embedder, None, texts, None, lambda ws: embed_vocabulary(embedder, ws), chunk=EMBED_CHUNK, words_after=1)
    try:
        with stage("validation"):
            check(db, principal, principal.user_id, items)
        with stage("vocabulary"):
            feed.give_words(vocabulary(db, principal, items))
        with released(db, principal):
            feed.ready()
        rows = store(
            db, principal, items, feed, checked=True, write_rows=repo.copy_in, action="episode.import", on_progress=on_progress
        )
    finally:
        feed.close()
    return [r.id for r in rows]


def run(sessions, settings, principal: Principal, items: list[EpisodeIn]) -> list[uuid.UUID]:
    """The CLI's import: the model loaded, a progress bar on stderr, one transaction committed."""
    import sys

    from tqdm import tqdm

    from app.kit.database.db import bind_principal, transaction
    from app.kit.runtime.embedding import make_embedder

    embedder = make_embedder(settings)
    with tqdm(total=len(items), desc="import", unit="episode", file=sys.stderr) as bar, transaction(sessions) as db:
        bind_principal(db, principal)
        return import_items(db, embedder, principal, items, on_progress=lambda done, _: bar.update(done - bar.n))
