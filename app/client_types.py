"""The typed shapes of the Python client (app/client.py): literal types of the REST contract's
enumerations and the keyword-argument dicts its methods accept. Item types, job kinds, asset kinds
and statuses and feedback signals come from their tables (app/kit/items.py, app/jobs/kinds.py,
app/knowledge/kinds.py, app/feedback/schemas.py), as the service's schemas do."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal, TypedDict

from app.feedback.schemas import Signal
from app.jobs.kinds import KindName
from app.kit.items import ItemName, SearchType
from app.knowledge.kinds import AssetKind, AssetStatus  # noqa: F401 - part of the client's types

JSON = dict[str, Any]
Id = str | uuid.UUID
Visibility = Literal["private", "group", "org"]
EpisodeKind = Literal["conversation", "trajectory", "feedback", "note"]
MemoryKind = Literal["fact", "rule", "preference", "procedure", "schema_hint", "instruction", "skill"]
Outcome = Literal["success", "failure", "unknown"]
ItemType = SearchType  # what search returns
JobKind = KindName
Role = Literal["user", "assistant", "tool"]
FeedbackSignal = Signal
# The memory list's `status` (GET /v1/memories; tests/test_client_reads.py checks it against the API's enum).
MemoryStatus = Literal["active", "quarantined", "superseded"]
TERMINAL_JOB_STATES = frozenset({"succeeded", "failed", "cancelled"})


class Access(TypedDict, total=False):
    visibility: Visibility
    groups: list[str]
    labels: list[str]


class EpisodeFields(Access, total=False):
    messages: list[JSON]
    session_id: str
    outcome: Outcome
    metadata: JSON
    occurred_at: datetime | str


class MemoryFields(Access, total=False):
    confidence: float
    sources: list[JSON]
    valid_from: datetime | str
    agent_id: str  # kinds instruction and skill: the agent whose profile it is part of


class MemoryChanges(Access, total=False):
    text: str
    kind: MemoryKind
    confidence: float


class SearchFilters(TypedDict, total=False):
    kinds: list[str]
    labels: list[str]
    since: datetime | str
    until: datetime | str
    session_id: str


class ListFilters(TypedDict, total=False):
    """The list endpoints' filters (GET /v1/memories, /v1/episodes, /v1/knowledge/assets); each only
    narrows what the key may see. `kind`: one or several; `cursor`: the last page's `next_cursor`."""

    kind: str | list[str]
    owner: Id
    visibility: Visibility
    group: str
    label: str
    since: datetime | str
    until: datetime | str
    cursor: str
    limit: int


class FeedbackItem(TypedDict):
    type: ItemName
    id: Id
    signal: FeedbackSignal
