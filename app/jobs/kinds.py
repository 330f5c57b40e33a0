"""The one table of job kinds: what each kind runs, the parameters it takes, when it runs by
itself and whether it may run in a branch. The API's `kind` enum and params schema, the runner,
the scheduler, the CLI, the client and the MCP tools all read it; a new kind is one row here and
its pipeline's `run(ctx, job) -> stats`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from app.jobs.params import (
    BootstrapParams,
    ConsolidateParams,
    DistillParams,
    ReembedParams,
    RetentionParams,
    TrainCartridgeParams,
    TrainManagerParams,
)

HOUR, DAY = 3600, 86400


@dataclass(frozen=True)
class JobKind:
    name: str
    pipeline: str  # "module:function", imported on first use so that the API process stays light
    params: type[BaseModel]  # validated at the API (422) and again by the pipeline
    every_s: int | None = None  # default schedule in seconds (org.settings["schedules"] overrides); None: on request
    branchable: bool = False  # may run in a branch, reading and writing the branch's view (app/kit/tenancy/view.py)
    admins_only: bool = False  # only an org admin (or the operator) may create it
    check: str | None = None  # "module:function"(params): checks beyond the schema at creation (a 4xx), imported on use


JOB_KINDS: dict[str, JobKind] = {
    k.name: k
    for k in (
        JobKind("bootstrap", "pipelines.bootstrap.job:run", BootstrapParams, branchable=True),
        JobKind("distill", "pipelines.distillation.job:run", DistillParams, every_s=HOUR, branchable=True),
        JobKind("consolidate", "pipelines.consolidation.job:run", ConsolidateParams, every_s=DAY, branchable=True),
        JobKind("train_cartridge", "pipelines.cartridges.job:run", TrainCartridgeParams),
        JobKind("retention", "pipelines.retention:run", RetentionParams, every_s=DAY),
        JobKind("train_manager", "pipelines.manager:run", TrainManagerParams),
        JobKind("reembed", "app.embedders.job:run", ReembedParams, admins_only=True, check="app.embedders.service:check_params"),
    )
}

KIND_NAMES = tuple(JOB_KINDS)
KindName = Literal[KIND_NAMES]
BRANCHABLE = tuple(n for n, k in JOB_KINDS.items() if k.branchable)


def imported(ref: str):
    """The function a "module:function" reference of the table names (imported now)."""
    import importlib

    mod, fn = ref.split(":")
    return getattr(importlib.import_module(mod), fn)
