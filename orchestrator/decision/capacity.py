"""When a job could start on the on-prem cluster, from what runs and waits there now."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from orchestrator.decision.demand import Demand, room_left
from orchestrator.decision.models import Capacity


@dataclass(frozen=True, slots=True)
class Running:
    """A job holding (or queued for) cluster resources; `remaining_s` None when unknown."""

    cpus: float
    gpus: float
    remaining_s: Optional[float]
    queued: bool = False


def estimate_start(free_cpus: float, free_gpus: float, jobs: Sequence[Running],
                   need_cpus: float, need_gpus: float, source: str) -> Capacity:
    """Start now when enough is free and nobody queues ahead; else wait until enough of
    the running jobs end, taking the soonest-ending first. Queued jobs go first (FIFO)."""
    ahead_cpus = sum(j.cpus for j in jobs if j.queued)
    ahead_gpus = sum(j.gpus for j in jobs if j.queued)
    want_cpus, want_gpus = need_cpus + ahead_cpus, need_gpus + ahead_gpus
    if free_cpus >= want_cpus and free_gpus >= want_gpus:
        return Capacity(can_start_now=True, wait_minutes=0.0, source=source)
    cpus, gpus, wait = free_cpus, free_gpus, 0.0
    for job in sorted((j for j in jobs if not j.queued),
                      key=lambda j: math.inf if j.remaining_s is None else j.remaining_s):
        cpus, gpus = cpus + job.cpus, gpus + job.gpus
        wait = math.inf if job.remaining_s is None else max(wait, job.remaining_s)
        if cpus >= want_cpus and gpus >= want_gpus:
            break
    else:
        wait = math.inf  # even an empty cluster would not hold it, or usage is unexplained
    minutes = None if math.isinf(wait) else wait / 60.0
    return Capacity(can_start_now=False, wait_minutes=minutes, source=source)


@dataclass(frozen=True, slots=True)
class ClusterLoad:
    """What the cluster has free and runs now: enough to estimate when any job could
    start, so placement asks it once per offer, with what the job would hold there."""

    free_cpus: float
    free_gpus: float
    jobs: tuple[Running, ...] = ()

    @classmethod
    def of(cls, total: Demand, used: Demand, jobs: Sequence[Running]) -> "ClusterLoad":
        """Free as `orch serve`'s queue counts it (demand.room_left), the running jobs'
        records giving what they hold."""
        held = Demand(sum(j.cpus for j in jobs if not j.queued),
                      sum(j.gpus for j in jobs if not j.queued))
        free = room_left(total, used, held)
        return cls(free.cpus, free.gpus, tuple(jobs))

    def start(self, need: Demand, source: str) -> Capacity:
        return estimate_start(self.free_cpus, self.free_gpus, self.jobs, need.cpus, need.gpus,
                              source)
