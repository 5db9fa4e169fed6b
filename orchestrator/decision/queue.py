"""Which queued jobs `orch serve` launches now, and what the others wait for. No I/O.

Each target keeps its own line, in queue order (priority, highest first, then submission
time). The line is strict: a job starts only when everything ahead of it on the same
target has started, so a big job at the head is never overtaken by smaller ones and
cannot starve; the price is capacity left idle while the head waits. Priority is the way
to jump the line. A target without a room (the cloud) holds nothing back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, Optional, Sequence

# What a job holds is decided once, for placement and the Ray metadata too; the queue
# re-exports it for its callers.
from orchestrator.decision.demand import Demand, job_demand, room_left

__all__ = ["Action", "Demand", "QueuePlan", "Queued", "Room", "Verdict", "job_demand",
           "ordinal", "plan_queue", "queue_order"]

Action = Literal["launch", "wait", "never"]


@dataclass(frozen=True, slots=True)
class Room:
    """What one target holds. `total` is the most it can ever hold; `used` what its
    backend reports held now; `reserved` what orch's own unfinished jobs there ask for,
    whether or not the backend shows them yet (a job launched a second ago holds nothing
    in Ray's view until its workers start). The larger of the two counts, per resource:
    the backend's view alone would let one pass launch everything before it catches up."""

    total: Demand
    used: Demand = Demand()
    reserved: Demand = Demand()
    problem: Optional[str] = None  # why the target could not be read: its jobs wait
    most: Optional[Demand] = None  # the most it can ever hold, when more than `total`

    def free(self, launched: Demand = Demand()) -> Demand:
        return room_left(self.total, self.used, self.reserved).minus(launched)


@dataclass(frozen=True, slots=True)
class Queued:
    id: str
    target: Optional[str]
    demand: Demand
    priority: int = 0
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    id: str
    action: Action
    message: str
    target: Optional[str] = None
    position: int = 0  # in its target's line, 1 = next to start; 0 once it leaves the line


@dataclass(frozen=True, slots=True)
class QueuePlan:
    verdicts: tuple[Verdict, ...] = field(default_factory=tuple)

    def of(self, action: Action) -> list[Verdict]:
        return [v for v in self.verdicts if v.action == action]


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def queue_order(jobs: Sequence[Queued]) -> list[Queued]:
    """Priority first (highest), then submission time, then id: the same order every time."""
    return sorted(jobs, key=lambda j: (-j.priority, j.created_at, j.id))


def plan_queue(jobs: Sequence[Queued], rooms: Mapping[str, Optional[Room]]) -> QueuePlan:
    """Decide, for every queued job, launch now, wait (and for what), or never (its demand
    exceeds all its target could ever hold). `rooms[target]` None, or a target not in
    `rooms`: no limit there (the cloud rents what a job needs), so its jobs launch at once.
    What this pass launches counts against the room of the jobs after it."""
    launched: dict[str, Demand] = {}
    line: dict[str, int] = {}  # jobs waiting so far, per target
    head: dict[str, str] = {}  # the first waiting job, per target
    out: list[Verdict] = []
    for job in queue_order(jobs):
        t = job.target or "?"
        room = rooms.get(t)
        if room is None:
            out.append(Verdict(job.id, "launch", f"launched on {t}: no capacity limit there", t))
            continue
        most = room.most or room.total
        if room.problem is None and not job.demand.within(most):
            out.append(Verdict(job.id, "never", (
                f"never launched: it needs {job.demand.describe()}, and {t} has "
                f"{_amount(most, job.demand)} in all, so it would wait forever; ask for fewer "
                "workers or GPUs, or place it elsewhere (placement.allow)"), t))
            continue
        free = room.free(launched.get(t, Demand()))
        if t not in head and room.problem is None and job.demand.within(free):
            launched[t] = launched.get(t, Demand()) + job.demand
            out.append(Verdict(job.id, "launch", f"launched on {t}: {job.demand.describe()} "
                               f"needed, {free.describe()} free", t))
            continue
        line[t] = line.get(t, 0) + 1
        place = f"{ordinal(line[t])} in line for {t}"
        if room.problem is not None:
            why = f"waiting for {t}: {room.problem}; {place}"
        elif t in head:
            why = (f"waiting for {job.demand.describe()} on {t}: {place}, after {head[t]} "
                   "(each target starts its line in order)")
        else:
            why = (f"waiting for {job.demand.describe()} on {t}: {_amount(free, job.demand)} "
                   f"free of {_amount(room.total, job.demand)}; {place}")
        head.setdefault(t, job.id)
        out.append(Verdict(job.id, "wait", why, t, line[t]))
    return QueuePlan(tuple(out))


def _amount(have: Demand, need: Demand) -> str:
    """How much of each resource the job needs there is: "1 GPU", "0 GPU and 4 CPU"."""
    return " and ".join(f"{n:g} {unit}" for n, unit, want in (
        (have.gpus, "GPU", need.gpus), (have.cpus, "CPU", need.cpus)) if want) or "nothing"
