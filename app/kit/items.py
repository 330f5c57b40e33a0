"""The one table of item types: what an item `type` string ("memory", "episode", ...) names, and
every list of types the API publishes, derived from it (lineage's path parameter, a memory's
sources, search's types, a branch's changes, retention's targets) with their Literal types.

Plain data, so that the client and the CLI read it without loading SQLAlchemy: a type's model is
named by its import path and resolved on first use (app/kit/registry.py imports them all).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from operator import attrgetter
from typing import Literal


@dataclass(frozen=True)
class ItemType:
    name: str
    model_path: str  # "module:Class" of its SQLAlchemy model
    text_col: str | None  # the column that holds the item's text (None: described, see registry.text_of)
    time_col: str  # when it happened or was recorded (search's since/until filters)
    source: bool = False  # may be named as a memory's source (lineage `distilled_from`, ...)
    # Its place (1, 2, ...) in the lists that search and branches publish (their OpenAPI enums and
    # search's default `types` keep that order); 0: not searched / no branch copy of its own.
    searched: int = 0
    branched: int = 0
    retained: bool = False  # an org's retention policy may delete it (the scheduled `retention` job)

    @property
    def model(self) -> type:
        module, cls = self.model_path.split(":")
        return getattr(importlib.import_module(module), cls)


# Each type's name, for the code that is about that one type (episodes are raw and append-only,
# memories are versioned, ...).
EPISODE, MEMORY, CHUNK, ASSET, CARTRIDGE = "episode", "memory", "chunk", "asset", "cartridge"

ITEM_TYPES: dict[str, ItemType] = {
    t.name: t
    for t in (
        ItemType(
            EPISODE, "app.episodes.models:Episode", "content", "occurred_at", source=True, searched=2, branched=2, retained=True
        ),
        ItemType(MEMORY, "app.memories.models:Memory", "text", "recorded_at", source=True, searched=1, branched=1),
        ItemType(CHUNK, "app.knowledge.models:Chunk", "text", "created_at", source=True, searched=3),
        ItemType(ASSET, "app.knowledge.models:KnowledgeAsset", "title", "created_at", source=True, branched=3),
        ItemType(CARTRIDGE, "app.cartridges.models:CartridgeRecord", None, "created_at"),
    )
}


def _ranked(place: str) -> tuple[str, ...]:
    return tuple(t.name for t in sorted((t for t in ITEM_TYPES.values() if getattr(t, place)), key=attrgetter(place)))


ITEM_NAMES = tuple(ITEM_TYPES)  # every item type: lineage's path parameter
SOURCE_TYPES = tuple(n for n, t in ITEM_TYPES.items() if t.source)  # a memory's sources
SEARCH_TYPES = _ranked("searched")  # what search ranks and returns (its default `types`)
BRANCH_TYPES = _ranked("branched")  # what a branch writes or masks (its changes)
RETAINED_TYPES = tuple(n for n, t in ITEM_TYPES.items() if t.retained)  # what a retention policy names

ItemName = Literal[ITEM_NAMES]
SourceType = Literal[SOURCE_TYPES]
SearchType = Literal[SEARCH_TYPES]
BranchType = Literal[BRANCH_TYPES]
RetainedType = Literal[RETAINED_TYPES]
