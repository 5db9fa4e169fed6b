"""When a job could start on the on-prem cluster, from what runs and waits there now."""

from __future__ import annotations

import heapq
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
    """Start now when enough is free and nobody queues ahead; else replay the cluster:
    running jobs end at their estimated times, queued jobs start in turn (first in,
    first out) as soon as they fit and hold what they need for their estimated hours
    (`remaining_s` of a queued job is its whole estimated run), and this job starts when
    its turn comes and it fits. Unknown only when it waits on a job of unknown length,
    or could never fit at all."""
    queued = [j for j in jobs if j.queued]
    if not queued and free_cpus >= need_cpus - 1e-9 and free_gpus >= need_gpus - 1e-9:
        return Capacity(can_start_now=True, wait_minutes=0.0, source=source)
    inf = math.inf
    ends = [(inf if j.remaining_s is None else j.remaining_s, i, j.cpus, j.gpus)
            for i, j in enumerate(jobs) if not j.queued]
    heapq.heapify(ends)
    cpus, gpus, now, seq = free_cpus, free_gpus, 0.0, len(jobs)
    for j in [*queued, Running(need_cpus, need_gpus, None)]:
        while cpus < j.cpus - 1e-9 or gpus < j.gpus - 1e-9:
            if not ends or math.isinf(ends[0][0]):  # never fits, or waits on the unknown
                return Capacity(can_start_now=False, wait_minutes=None, source=source)
            now, _, c, g = heapq.heappop(ends)
            cpus, gpus = cpus + c, gpus + g
        cpus, gpus = cpus - j.cpus, gpus - j.gpus
        seq += 1
        heapq.heappush(ends, (inf if j.remaining_s is None else now + j.remaining_s, seq,
                              j.cpus, j.gpus))
    return Capacity(can_start_now=now <= 0.0, wait_minutes=now / 60.0, source=source)


def expected_remaining_s(est_s: float, elapsed_s: float, spread: float) -> float:
    """What is left of a running job estimated at `est_s` seconds, `elapsed_s` in, whose
    estimate may run `spread` times long (its uncertainty, HoursEstimator.spread): the
    estimate's rest while it lasts; past it, not "any moment now" but half of (spread - 1)
    of the time run so far: the longer a job has outlived its estimate, the longer it is
    expected to go on (as with a heavy tail), and never less than a minute."""
    if elapsed_s < est_s:
        return est_s - elapsed_s
    return max(60.0, elapsed_s * max(spread - 1.0, 0.0) / 2.0)


@dataclass(frozen=True, slots=True)
class ClusterLoad:
    """What the cluster has free and runs now: enough to estimate when any job could
    start, so placement asks it once per offer, with what the job would hold there."""

    free_cpus: float
    free_gpus: float
    jobs: tuple[Running, ...] = ()

    @classmethod
    def of(cls, total: Demand, used: Demand, jobs: Sequence[Running]) -> ClusterLoad:
        """Free as `orch serve`'s queue counts it (demand.room_left), the running jobs'
        records giving what they hold."""
        held = Demand(sum(j.cpus for j in jobs if not j.queued),
                      sum(j.gpus for j in jobs if not j.queued))
        free = room_left(total, used, held)
        return cls(free.cpus, free.gpus, tuple(jobs))

    def start(self, need: Demand, source: str) -> Capacity:
        return estimate_start(self.free_cpus, self.free_gpus, self.jobs, need.cpus, need.gpus,
                              source)
