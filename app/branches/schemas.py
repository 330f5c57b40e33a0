from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints

from app.kit.http.schemas import Instant, StrictModel
from app.kit.items import EPISODE, MEMORY, BranchType

BranchName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$")]


class BranchIn(StrictModel):
    name: BranchName
    from_: BranchName = Field(default="main", alias="from")
    at: Instant | None = None  # fork the base as it stood then (default: now)


class BranchOut(BaseModel):
    id: uuid.UUID
    name: str
    from_: str = Field(serialization_alias="from")
    fork_at: datetime
    created_at: datetime
    created_by: uuid.UUID | None


class BranchList(BaseModel):
    branches: list[BranchOut]


class Change(BaseModel):
    """One thing a branch changed: an item it wrote (`created`, `new_version`) or one of its base
    that it deleted or replaced (`deleted`; `id` is the memory root, the episode or the asset). A
    source re-bootstrapped in the branch is its new asset (`created`, `text`: the source URI) and
    the base's asset `deleted`."""

    change: Literal["created", "new_version", "deleted"]
    type: BranchType
    id: uuid.UUID
    root_id: uuid.UUID | None = None
    version: int | None = None
    status: str | None = None
    kind: str | None = None
    text: str | None = None
    at: datetime


class BranchDiff(BaseModel):
    name: str
    changes: list[Change]


class PromoteIn(StrictModel):
    ids: list[uuid.UUID] = Field(min_length=1, max_length=500)


class Promoted(BaseModel):
    id: uuid.UUID  # the branch item (or the masked key) named in the request
    type: Literal[MEMORY, EPISODE]  # an asset comes from its sources: a bootstrap in main takes it over
    change: Literal["created", "new_version", "deleted"]
    main_id: uuid.UUID | None  # what it became in main (None: a deletion)


class PromoteOut(BaseModel):
    name: str
    promoted: list[Promoted]
