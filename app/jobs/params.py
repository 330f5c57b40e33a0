"""Parameters of each job kind, validated at the API (422) and again by the pipeline."""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import StrictBool, Field

from app.kit.schemas import AccessIn, NumberOnly, StrictModel


class BootstrapParams(AccessIn):
    path: str | None = Field(default=None, max_length=500, description="folder under MEMSCALE_BOOTSTRAP_ROOT")
    glossary: str | None = Field(default=None, max_length=500, description="CSV under MEMSCALE_BOOTSTRAP_ROOT")
    schema_url: str | None = Field(default=None, max_length=1000, description="SQLAlchemy URL (admins only)")
    enrich: StrictBool = Field(default=True, description="run the enrich step (descriptions, joins, linked terms, "
                                                   "sections) and build the knowledge tree")


class DistillParams(StrictModel):
    batch_size: Annotated[int, Field(ge=1, le=64), NumberOnly] = 8
    max_episodes: Annotated[int, Field(ge=1, le=1_000_000), NumberOnly] | None = None
    min_age_s: Annotated[float, Field(ge=0, le=3600), NumberOnly] = 2.0


class ConsolidateParams(StrictModel):
    duplicate_threshold: Annotated[float, Field(ge=0.5, le=1.0), NumberOnly] = 0.92
    conflict_threshold: Annotated[float, Field(ge=0.3, le=1.0), NumberOnly] = 0.75
    ttl_days: Annotated[float, Field(gt=0), NumberOnly] | None = None


class TrainCartridgeParams(StrictModel):
    asset_ids: list[uuid.UUID] = Field(default_factory=list, max_length=1000)
    p: Annotated[int, Field(ge=4, le=4096), NumberOnly] = 64
    steps: Annotated[int, Field(ge=1, le=100_000), NumberOnly] = 40


class RetentionParams(StrictModel):
    pass


PARAMS = {"bootstrap": BootstrapParams, "distill": DistillParams, "consolidate": ConsolidateParams,
          "train_cartridge": TrainCartridgeParams, "retention": RetentionParams}
