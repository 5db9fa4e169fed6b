"""orch's own job-file sections, beside SkyPilot's keys: train, scaling, data, schedule,
budget, placement, checkpoint, estimate and utilization_policy."""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    PositiveFloat,
    PositiveInt,
    Tag,
    field_validator,
    model_validator,
)

from orchestrator.base.inputs import clip, storage_problem
from orchestrator.spec.base import TARGETS, Strict, Target, plain
from orchestrator.spec.cron import cron_problem

_ENTRYPOINT_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_RESUME_RE = re.compile(r"^(latest|orch-[A-Za-z0-9]*)$")


def _auto_bool(v: Any) -> Any:
    if v == "auto" or isinstance(v, bool):
        return v
    raise ValueError(f"{v!r}: write auto, true or false")


def _auto_count(v: Any) -> Any:
    if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
        return v
    raise ValueError(f"{v!r}: write auto or a whole number >= 0")


AutoBool = Annotated[Union[Literal["auto"], bool], BeforeValidator(_auto_bool)]
AutoCount = Annotated[Union[Literal["auto"], int], BeforeValidator(_auto_count)]


class Train(Strict):
    job: Optional[str] = None
    entrypoint: Optional[str] = None
    config: dict[str, Any] = Field(default_factory=dict)
    sweep: list[str] = Field(default_factory=list,
                             description="config keys that vary between runs of the same job")

    @field_validator("config", mode="before")
    @classmethod
    def _check_config(cls, v: Any) -> Any:
        return plain(v) if isinstance(v, dict) else v

    @field_validator("entrypoint")
    @classmethod
    def _check_entrypoint(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _ENTRYPOINT_RE.match(v):
            raise ValueError(f"{v!r} is not an entrypoint: write 'package.module:function'")
        return v

    @field_validator("job")
    @classmethod
    def _check_job(cls, v: Optional[str]) -> Optional[str]:
        from jobs.builtin import BUILTIN_JOBS  # a plain dict, no torch import

        if v is not None and v not in BUILTIN_JOBS:
            raise ValueError(f"no built-in job {v!r}; built-in jobs: {', '.join(sorted(BUILTIN_JOBS))}")
        return v

    @model_validator(mode="after")
    def _one_of(self) -> Train:
        if (self.job is None) == (self.entrypoint is None):
            raise ValueError("give exactly one of 'job' (a built-in job) or "
                             "'entrypoint' ('package.module:function')")
        return self


class ElasticWorkers(Strict):
    """`num_workers: {min: 2, max: 8}`: an elastic run, started on what is free (at least
    `min`), grown by a restart from its latest checkpoint as more frees, up to `max`."""
    min: PositiveInt
    max: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> ElasticWorkers:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is more than max ({self.max})")
        return self


def _workers_kind(v: Any) -> str:
    return "ElasticWorkers" if isinstance(v, (dict, ElasticWorkers)) else "int"


# One number, or {min, max}: a mapping is read as the range alone, so its errors are its own.
Workers = Annotated[Union[Annotated[PositiveInt, Tag("int")],
                          Annotated[ElasticWorkers, Tag("ElasticWorkers")]],
                    Discriminator(_workers_kind)]


class Scaling(Strict):
    num_workers: Workers = 1
    use_gpu: AutoBool = "auto"
    # pack: fill a node before the next (fast links within a node); spread: one per node.
    placement: Literal["pack", "spread"] = "pack"

    @property
    def min_workers(self) -> int:
        """The workers it starts with at least: what placement and the queue hold for it."""
        n = self.num_workers
        return n.min if isinstance(n, ElasticWorkers) else n

    @property
    def max_workers(self) -> int:
        n = self.num_workers
        return n.max if isinstance(n, ElasticWorkers) else n

    @property
    def elastic(self) -> bool:
        return isinstance(self.num_workers, ElasticWorkers) and self.num_workers.min < self.num_workers.max


class Data(Strict):
    loader_workers: AutoCount = "auto"
    pin_memory: AutoBool = "auto"


class ScheduleSection(Strict):
    kind: Literal["auto", "exploratory", "steady"] = "auto"
    cron: Optional[str] = None
    deadline_hours: Optional[PositiveFloat] = Field(
        default=None, description="hours after submission by which the job should be done: steady "
                                  "work waits for owned GPUs while it can still finish by then")

    @field_validator("cron")
    @classmethod
    def _check_cron(cls, v: Optional[str]) -> Optional[str]:
        problem = None if v is None else cron_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class BudgetSection(Strict):
    max_cost: Optional[PositiveFloat] = None
    max_hourly: Optional[PositiveFloat] = None


def _declared(target: str) -> str:
    """A target base.targets declares (a backend's own line there: docs/backends.md)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}: use one of {', '.join(TARGETS)}")
    return target


class PlacementSection(Strict):
    allow: list[Annotated[Target, AfterValidator(_declared)]] = Field(
        default_factory=lambda: list(TARGETS))

    @field_validator("allow")
    @classmethod
    def _check_allow(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError(f"allow at least one of {', '.join(TARGETS)}")
        if len(set(v)) != len(v):
            raise ValueError("each target may appear once")
        return v


class Checkpoint(Strict):
    storage: Optional[str] = None
    num_to_keep: PositiveInt = 2
    max_failures: int = Field(default=0, ge=-1, description="worker-group restarts; -1 means unlimited")
    resume_from: Optional[str] = Field(
        default=None, description="continue an earlier job's run from its latest checkpoint: a job "
                                  "id (or unique prefix), or 'latest' for the newest job of this name")

    @field_validator("storage")
    @classmethod
    def _check_storage(cls, v: Optional[str]) -> Optional[str]:
        problem = None if v is None else storage_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("resume_from")
    @classmethod
    def _check_resume_from(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _RESUME_RE.match(v):
            close = difflib.get_close_matches(v, ["latest"], n=1)
            raise ValueError(f"{clip(v)} is neither 'latest' nor a job id: write latest, or "
                             "a job id (or its unique prefix) from `orch status`, e.g. orch-1a2b3c4d"
                             + (" (did you mean 'latest'?)" if close else ""))
        return v


class EstimateSection(Strict):
    hours: PositiveFloat
    gpu: Optional[str] = None


class UtilizationPolicy(Strict):
    """dstack's `utilization_policy`: a run whose every device stays below `min_utilization`
    percent busy for `window_minutes` is warned about or stopped (never within its first
    window); on a CPU worker the figure is its CPU use."""

    min_utilization: float = Field(gt=0, le=100, description="percent busy (a GPU's utilization, "
                                   "or a CPU worker's CPU use) below which a device counts idle")
    window_minutes: PositiveFloat = Field(description="how long every device must stay below it")
    action: Literal["warn", "stop"] = Field("warn", description="warn: a log line and a note in "
                                            "the job's record; stop: the run ends FAILED")
