"""Parameters of each job kind (app/jobs/kinds.py names which), validated at the API (422) and
again by the pipeline.

Every size is bounded so that one job cannot hold a shared worker for days (a `train_cartridge`
job with `steps: 100000`); the bounds and their reasons are in docs/security.md ("Jobs: bounds,
cancellation, fair claiming"). Beyond them: 422.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import Field, StrictBool

from app.kit.http.schemas import AccessIn, NumberOnly, StrictModel
from app.memories.near_duplicates import CONFLICT_SIMILARITY, DUPLICATE_SIMILARITY

MAX_TRAIN_STEPS = 2_000


class BootstrapParams(AccessIn):
    path: str | None = Field(default=None, max_length=500, description="folder under MEMSCALE_BOOTSTRAP_ROOT")
    glossary: str | None = Field(default=None, max_length=500, description="CSV under MEMSCALE_BOOTSTRAP_ROOT")
    schema_url: str | None = Field(default=None, max_length=1000, description="SQLAlchemy URL (admins only)")
    enrich: StrictBool = Field(
        default=True, description="run the enrich step (descriptions, joins, linked terms, sections) and build the knowledge tree"
    )


class DistillParams(StrictModel):
    batch_size: Annotated[int, Field(ge=1, le=64), NumberOnly] = 8
    max_episodes: Annotated[int, Field(ge=1, le=1_000_000), NumberOnly] | None = None
    min_age_s: Annotated[float, Field(ge=0, le=3600), NumberOnly] = 2.0


class ConsolidateParams(StrictModel):
    duplicate_threshold: Annotated[float, Field(ge=0.5, le=1.0), NumberOnly] = DUPLICATE_SIMILARITY
    conflict_threshold: Annotated[float, Field(ge=0.3, le=1.0), NumberOnly] = CONFLICT_SIMILARITY
    # Ten years: the longest retention rule a deployment keeps (invoices: 7 years); beyond it,
    # leave the TTL unset. Unbounded, 1e300 days overflowed the job's date arithmetic.
    ttl_days: Annotated[float, Field(gt=0, le=3653), NumberOnly] | None = None


class TrainCartridgeParams(StrictModel):
    # One cartridge is one corpus the teacher reads whole: a few hundred documents at most.
    asset_ids: list[uuid.UUID] = Field(default_factory=list, max_length=256)
    # The Cartridges paper's largest prefixes (4,096 tokens: ~190 MB of fp32 KV for SmolLM2).
    p: Annotated[int, Field(ge=4, le=4096), NumberOnly] = 64
    # The paper's recipe trains for low thousands of steps on a GPU; on the CPU tier a step
    # costs 15-35 s, so 2,000 is already the most a shared worker should give one job.
    steps: Annotated[int, Field(ge=1, le=MAX_TRAIN_STEPS), NumberOnly] = 40


class RetentionParams(StrictModel):
    pass


class TrainManagerParams(StrictModel):
    """Trains on the org's most recent recorded decisions (app/manager/service.py bounds how many)."""


class ReembedParams(StrictModel):
    """The embedding model an org's vectors move to (a model id as MEMSCALE_EMBEDDING_MODEL takes)."""

    model: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@-]*$")
