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

import json
import uuid
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError
from sqlalchemy.orm import Session

from app.audit.service import record
from app.auth.principal import Principal
from app.episodes import repository as repo
from app.episodes.feed import Ahead, Feed
from app.episodes.schemas import EpisodeIn
from app.episodes.service import check, embed_text, embed_vocabulary, store, vocabulary
from app.kit.database.db import released
from app.kit.errors import BadRequest
from app.kit.http.schemas import AccessIn
from app.kit.runtime.embedding import token_counter
from app.kit.stages import stage
from app.kit.tenancy.access import assert_may_share
from app.kit.tenancy.scope import Scope
from app.kit.text import sha256

EMBED_CHUNK = 256  # texts per embedding call (one progress step)


class AssetLine(AccessIn):
    """A knowledge asset as an import line (`"type": "asset"`): its source, title and chunks (the
    file carries them chunked, as bootstrap would store them), written as bootstrap writes an
    asset (app/knowledge/service.py `upsert_asset`: an unchanged uri is skipped, a changed one
    has its chunks replaced)."""

    type: Literal["asset"]
    kind: Literal["document", "table_schema", "glossary"]
    uri: str = Field(min_length=1, max_length=2000)
    title: str = Field(default="", max_length=1000)
    chunks: list[Annotated[str, Field(min_length=1, max_length=100_000)]] = Field(min_length=1, max_length=10_000)
    metadata: dict[str, Any] = Field(default_factory=dict)


def _line(line: str) -> EpisodeIn | AssetLine:
    if '"type"' not in line:  # the common case, parsed once
        return EpisodeIn.model_validate_json(line)
    data = json.loads(line)
    if isinstance(data, dict) and data.get("type") == "asset":
        return AssetLine.model_validate(data)
    if isinstance(data, dict) and data.get("type", "episode") == "episode":
        data.pop("type", None)
    return EpisodeIn.model_validate(data)


def parse_lines(lines: Iterable[str]) -> list[EpisodeIn | AssetLine]:
    """Every non-blank line as an episode body (`"type": "episode"`, the default) or a knowledge
    asset (`"type": "asset"`); the first bad one refuses the whole import."""
    items = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            items.append(_line(line))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or "body"
            raise BadRequest(f"line {n}: {where}: {err.get('msg', 'invalid')}", code="invalid_import_line") from None
        except ValueError:
            raise BadRequest(f"line {n}: body: not a JSON object", code="invalid_import_line") from None
    if not items:
        raise BadRequest("nothing to import: the file holds no episode or asset", code="empty_import")
    return items


def principal_of(db: Session, org_name: str, user_name: str) -> Principal:
    """The named user of the named org, as its API key would stand for it."""
    from app.orgs import service as orgs

    u = orgs.user_by_name(db, orgs.org_by_name(db, org_name), user_name)
    return Principal(
        org_id=u.org_id, user_id=u.id, name=u.name, roles=tuple(u.roles), groups=tuple(u.groups), clearances=tuple(u.clearances)
    )


def import_items(
    db: Session,
    embedder,
    principal: Principal,
    items: list[EpisodeIn | AssetLine],
    *,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[uuid.UUID]:
    """Embed, check and write in the caller's transaction (the caller commits): the model starts
    on the first chunk at once, while this thread checks the scopes and looks up the new
    vocabulary (embedded after that chunk); then each chunk of EMBED_CHUNK texts is COPYed in
    while the next one embeds (app/episodes/feed.py). A refused item stops the model after its
    chunk in progress and writes nothing. Assets follow the episodes (`import_assets`). Returns
    the new ids (an asset's id for an asset line) in the order of `items`."""
    episodes = [i for i in items if isinstance(i, EpisodeIn)]
    assets = [i for i in items if isinstance(i, AssetLine)]
    for a in assets:  # refused before anything is embedded or written
        assert_may_share(principal, a.visibility, a.groups)
    ids = iter(_import_episodes(db, embedder, principal, episodes, on_progress) if episodes else [])
    asset_ids = iter(import_assets(db, embedder, principal, assets) if assets else [])
    return [next(ids) if isinstance(i, EpisodeIn) else next(asset_ids) for i in items]


def _import_episodes(db: Session, embedder, principal: Principal, items: list[EpisodeIn], on_progress) -> list[uuid.UUID]:
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
            db,
            principal,
            items,
            feed,
            checked=True,
            write_rows=repo.copy_in,
            action="episode.import",
            on_progress=on_progress,
            embedder=embedder,
        )
    finally:
        feed.close()
    return [r.id for r in rows]


def import_assets(db: Session, embedder, principal: Principal, assets: list[AssetLine]) -> list[uuid.UUID]:
    """Knowledge assets owned by the principal, in the caller's transaction: their chunks embedded
    in one pass ahead of the writes (app/episodes/feed.py `Ahead`), each asset written set-based
    (`upsert_asset(bulk=True)`: chunks, `chunk_of` lineage, its audit event), then one
    `asset.import` event for the import."""
    from app.knowledge import service as knowledge
    from app.knowledge.service import AssetIn

    count = token_counter(embedder)
    counts = [[count(t) for t in a.chunks] for a in assets]  # before the model's thread starts
    ahead = Ahead(embedder.embed, [list(a.chunks) for a in assets], size=EMBED_CHUNK)
    out = []
    try:
        for k, a in enumerate(assets):
            scope = Scope(
                a.visibility, principal.user_id if a.visibility == "private" else None, tuple(a.groups), tuple(a.labels)
            )
            item = AssetIn(a.kind, a.uri, a.title, sha256("\n".join(a.chunks)), list(a.chunks), a.metadata)
            with stage("rows"):
                _, asset = knowledge.upsert_asset(
                    db,
                    ahead,
                    org_id=principal.org_id,
                    owner_id=principal.user_id,
                    scope=scope,
                    item=item,
                    count_tokens=count,
                    vectors=ahead.vectors(k),
                    token_counts=counts[k],
                    bulk=True,
                )
            out.append(asset.id)
    finally:
        ahead.close()
    record(
        db,
        org_id=principal.org_id,
        actor_id=principal.user_id,
        action="asset.import",
        target_type="asset",
        target_id=out[0] if len(out) == 1 else None,
        details={"count": len(out), "ids": [str(i) for i in out][:1000]},
    )
    return out


def run(sessions, settings, principal: Principal, items: list[EpisodeIn]) -> list[uuid.UUID]:
    """The CLI's import: the model loaded, a progress bar on stderr, one transaction committed."""
    import sys

    from tqdm import tqdm

    from app.kit.database.db import bind_principal, transaction
    from app.resources import Resources

    resources = Resources(settings)
    with tqdm(total=len(items), desc="import", unit="item", file=sys.stderr) as bar, transaction(sessions) as db:
        bind_principal(db, principal)
        embedder = resources.embedder_for(db, principal.org_id)  # the org's model (its old one during a re-embedding)
        return import_items(db, embedder, principal, items, on_progress=lambda done, _: bar.update(done - bar.n))
