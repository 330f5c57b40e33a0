"""Pydantic pieces shared by every domain: the access fields and common limits."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

Tag = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:&/\-]+$")]
Visibility = Literal["private", "group", "org"]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AccessIn(StrictModel):
    visibility: Visibility = "private"
    groups: list[Tag] = Field(default_factory=list, max_length=32)
    labels: list[Tag] = Field(default_factory=list, max_length=32)

    @model_validator(mode="after")
    def _groups_match_visibility(self):
        if self.visibility == "group" and not self.groups:
            raise ValueError("visibility 'group' needs at least one group")
        if self.visibility != "group" and self.groups:
            raise ValueError("groups are only allowed with visibility 'group'")
        self.groups = sorted(set(self.groups))
        self.labels = sorted(set(self.labels))
        return self


class AccessOut(BaseModel):
    visibility: Visibility
    groups: list[str]
    labels: list[str]
