"""Parameters of each job kind, validated at the API (422) and again by the pipeline."""

from __future__ import annotations

import uuid

from pydantic import Field

from app.kit.schemas import AccessIn, StrictModel


class BootstrapParams(AccessIn):
    path: str | None = Field(default=None, max_length=500, description="folder under MEMSCALE_BOOTSTRAP_ROOT")
    glossary: str | None = Field(default=None, max_length=500, description="CSV under MEMSCALE_BOOTSTRAP_ROOT")
    schema_url: str | None = Field(default=None, max_length=1000, description="SQLAlchemy URL (admins only)")


class DistillParams(StrictModel):
    batch_size: int = Field(default=8, ge=1, le=64)
    max_episodes: int | None = Field(default=None, ge=1, le=1_000_000)
    min_age_s: float = Field(default=2.0, ge=0, le=3600)


class ConsolidateParams(StrictModel):
    duplicate_threshold: float = Field(default=0.92, ge=0.5, le=1.0)
    conflict_threshold: float = Field(default=0.75, ge=0.3, le=1.0)
    ttl_days: float | None = Field(default=None, gt=0)


class TrainCartridgeParams(StrictModel):
    asset_ids: list[uuid.UUID] = Field(default_factory=list, max_length=1000)
    p: int = Field(default=64, ge=4, le=4096)
    steps: int = Field(default=40, ge=1, le=100_000)


class RetentionParams(StrictModel):
    pass


PARAMS = {"bootstrap": BootstrapParams, "distill": DistillParams, "consolidate": ConsolidateParams,
          "train_cartridge": TrainCartridgeParams, "retention": RetentionParams}
