"""Pydantic pieces shared by every domain: the access fields and common limits."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, model_validator

Tag = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:&/\-]+$")]
Visibility = Literal["private", "group", "org"]


_ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _iso_datetime_only(value):
    """The schema says `format: date-time`: refuse numbers (pydantic's lax mode reads them as Unix times)."""
    if isinstance(value, datetime) or (isinstance(value, str) and _ISO_DATETIME.match(value)):
        return value
    raise ValueError("expected an ISO 8601 date-time string, e.g. 2026-01-31T12:00:00Z")


def _bounded_instant(value: datetime) -> datetime:
    """An instant PostgreSQL stores and psycopg reads back: with its offset, and inside
    0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999Z once the offset is applied (a timestamptz
    holds 4713 BC .. 294276 AD, which Python cannot read: one such row broke every read of its org)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("an instant needs its UTC offset (e.g. 2026-01-31T12:00:00Z or +02:00)")
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise ValueError("the instant lies outside 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999Z") from None
    return value


# Every date-time a client sends (bodies and query strings): ISO 8601 / RFC 3339 with its offset,
# in the range above (docs/security.md, "Instants"). One type for every field, no validator per field.
Instant = Annotated[datetime, BeforeValidator(_iso_datetime_only), AfterValidator(_bounded_instant)]


def _json_number_only(value):
    """The schema says `type: number|integer`: refuse true/false and numeric strings (lax mode takes them)."""
    if isinstance(value, (bool, str, bytes)):
        raise ValueError("expected a JSON number")
    return value


# For numbers in request bodies (not query strings, which arrive as text), after the constraints:
# `Annotated[float, Field(ge=0, le=1), NumberOnly]` (in that order, so that the JSON schema keeps
# minimum/maximum also inside `| None`).
NumberOnly = BeforeValidator(_json_number_only)


def _has_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_nul(v) for v in value)
    return False


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_nul_characters(cls, data):
        # PostgreSQL text and jsonb cannot hold U+0000: refuse it here (422), not at INSERT time (500).
        if _has_nul(data):
            raise ValueError("text may not contain NUL (U+0000) characters")
        return data


# The rule `_groups_match_visibility` enforces, stated in the JSON schema so that clients (and
# schemathesis) know it: `groups` is non-empty exactly when `visibility` is "group".
GROUPS_MATCH_VISIBILITY = {
    "if": {"properties": {"visibility": {"const": "group"}}, "required": ["visibility"]},
    "then": {"properties": {"groups": {"minItems": 1}}, "required": ["groups"]},
    "else": {"properties": {"groups": {"maxItems": 0}}},
}


class AccessIn(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=GROUPS_MATCH_VISIBILITY)

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
