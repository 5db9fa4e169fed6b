"""What the status page reads beyond a job's record, as the REST API answers it: a job's
per-epoch series and cost so far, the fleet, the month's spend. Money in settings.currency
(each answer names it); times are ISO 8601 UTC."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class _Shown(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Point(_Shown):
    """One `report` event: its index, its time (the runner's clock) and its numeric metrics."""
    index: int
    t: Optional[float] = None
    metrics: dict[str, float]


class CostSoFar(_Shown):
    so_far: float = Field(description="the full cost so far (owned hardware's purchase share and power, or the bill)")
    cash_so_far: float = Field(description="what was paid out: owned power, or the cloud bill")
    hours: float
    power_basis: Optional[str] = Field(default=None, description="measured or rated, for owned hardware")
    estimate: Optional[float] = Field(default=None, description="the full cost it was placed with")
    estimate_hours: Optional[float] = None


class JobProgress(_Shown):
    """`GET /v1/jobs/{id}/progress`."""
    id: str
    status: str
    currency: str
    points: list[Point]
    cost: CostSoFar


class FleetJob(_Shown):
    """A job running (or queued) somewhere, with what it has cost so far."""
    id: str
    name: str
    status: str
    owner: Optional[str] = None
    target: Optional[str] = None
    created_at: Optional[str] = None
    started_at: Optional[str] = None
    hours: float = 0.0
    cost: float = 0.0
    cash: float = 0.0
    gpu: Optional[str] = None
    gpus: float = 0
    where: Optional[str] = None
    infra: Optional[str] = None
    spot: bool = False
    price_per_hour: Optional[float] = None
    nodes: list[str] = Field(default_factory=list, description="its workers' nodes (ips), where known")


class FleetNode(_Shown):
    node_id: str
    ip: str
    alive: bool
    head: bool
    cpus: float
    gpus: float
    gpu_model: Optional[str] = None
    jobs: list[str] = Field(default_factory=list, description="the running jobs with a worker on it")


class QueuedJob(_Shown):
    id: str
    name: str
    owner: Optional[str] = None
    priority: int = 0
    created_at: Optional[str] = None
    waiting_for: Optional[str] = None


class OwnedTarget(_Shown):
    target: str
    problem: Optional[str] = Field(default=None, description="why its capacity is not shown")
    nodes: list[FleetNode]
    cpus: Optional[float] = None
    gpus: Optional[float] = None
    cpus_used: Optional[float] = None
    gpus_used: Optional[float] = None
    running: list[FleetJob]
    queued: list[QueuedJob]


class Fleet(_Shown):
    """`GET /v1/fleet`."""
    now: Optional[str] = None
    currency: str
    owned: list[OwnedTarget]
    rented: list[FleetJob]


class DaySpend(_Shown):
    day: str
    owned: float = Field(description="owned hardware's power (cash)")
    cloud: float = Field(description="cloud bills (cash)")
    spend: float = Field(description="what counts against monthly_budget (its basis)")


class GroupSpend(_Shown):
    target: Optional[str] = None
    owner: Optional[str] = None
    jobs: int
    cash: float
    cost: float


class SpentJob(_Shown):
    id: str
    name: str
    owner: Optional[str] = None
    target: Optional[str] = None
    status: str
    hours: float
    cash: float
    cost: float
    ended_at: Optional[str] = None


class SpendingPage(_Shown):
    """`GET /v1/spend`: each job counts on the day it ended (a running one today)."""
    month: str
    today: str
    currency: str
    basis: str
    budget: Optional[float] = None
    spent: float
    days: list[DaySpend]
    by_target: list[GroupSpend]
    by_owner: list[GroupSpend]
    biggest: list[SpentJob]


class StateCount(_Shown):
    all: int
    recent: int = Field(description="ended in this state within the last `hours`")


class JobCounts(_Shown):
    """`GET /v1/job-counts`."""
    hours: float
    states: dict[str, StateCount]


class Replica(_Shown):
    """One `orch serve` of the store, as its last look recorded it (server/replicas.py)."""
    id: str = Field(description="host/pid/start time: the launcher name its claims carry")
    url: Optional[str] = Field(default=None, description="where it listens, as it was started")
    role: str = Field(description="leading (holds the lease and runs the scheduler's duties) or standby")
    started_at: str
    seen_at: str
    this: bool = Field(description="whether it is the replica that answered")
