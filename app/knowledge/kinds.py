"""The one table of knowledge asset kinds and statuses: what bootstrap writes (a document, a table
schema, a glossary) and what becomes of an asset (active; dropped when its source is gone). The
asset list's filters, its OpenAPI enums and the client's types read it. Plain data, so the client
imports it without SQLAlchemy."""

from __future__ import annotations

from typing import Literal

ASSET_KINDS = ("document", "table_schema", "glossary")
ASSET_STATUSES = ("active", "dropped")

AssetKind = Literal[ASSET_KINDS]
AssetStatus = Literal[ASSET_STATUSES]
