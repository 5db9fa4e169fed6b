"""What a job holds on a Ray target while it runs: the one answer that placement's wait
estimate, the job's Ray metadata and `orch serve`'s queue all use. No I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from orchestrator.records.placement import PlacedOffer


@dataclass(frozen=True, slots=True)
class Demand:
    """What a job holds on a Ray cluster while it runs."""

    cpus: float = 0.0
    gpus: float = 0.0

    def __add__(self, other: Demand) -> Demand:
        return Demand(self.cpus + other.cpus, self.gpus + other.gpus)

    def minus(self, other: Demand) -> Demand:
        """What is left after `other`, never below nothing."""
        return Demand(max(0.0, self.cpus - other.cpus), max(0.0, self.gpus - other.gpus))

    def most(self, other: Demand) -> Demand:
        """The larger of the two, per resource."""
        return Demand(max(self.cpus, other.cpus), max(self.gpus, other.gpus))

    def within(self, room: Demand) -> bool:
        return self.cpus <= room.cpus + 1e-9 and self.gpus <= room.gpus + 1e-9

    def describe(self) -> str:
        parts = [f"{n:g} {unit}" for n, unit in ((self.gpus, "GPU"), (self.cpus, "CPU")) if n]
        return " and ".join(parts) or "nothing"


def room_left(total: Demand, used: Demand, held: Demand) -> Demand:
    """What a target has left: its total less what its backend reports used or what orch's
    records say its jobs hold, whichever is more, per resource. (A `run:` job holds
    nothing in Ray's view, nor a job whose workers are still starting.)"""
    return total.minus(used.most(held))


def _field(obj: Any, key: str) -> Any:
    """A field of a JobSpec, or of its stored JSON form (which may leave keys out)."""
    if obj is None:
        return None
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def _accelerator_count(accelerators: Any) -> float:
    """The count of the first accelerator a job file names (`H100:8`, `{H100: 8}`, `[H100:8]`):
    the one placement prices when nothing was chosen yet."""
    if not accelerators:
        return 0.0
    first = accelerators
    if isinstance(accelerators, Mapping):
        return float(next(iter(accelerators.values())) or 1)
    if isinstance(accelerators, (list, tuple)):
        first = accelerators[0]
    _, _, count = str(first).partition(":")
    try:
        return float(count) if count.strip() else 1.0
    except ValueError:
        return 1.0


def job_demand(spec: Any, choice: Optional[PlacedOffer] = None) -> Demand:
    """What a job holds on a Ray target. `spec` is a JobSpec or its stored JSON form (the
    same answer for both); `choice` the offer placement chose or is pricing (a decision's
    `choice`: its `gpu`, None on CPUs, and its `count`), None before one is known: then
    the job file's first accelerator stands in for it.

    A `train:` job holds what its Ray Train workers ask Ray for: one GPU each on GPUs (and
    no CPU, as Ray Train does), else one CPU each. It runs on GPUs when `scaling.use_gpu`
    is true, or is `auto` and the offer (or, without one, the job file) has a GPU for
    each worker (with fewer, Ray Train's workers run on CPUs, as the runner decides). A `run:`
    job is one process: its accelerator count in GPUs, else `resources.cpus` CPUs (at
    least one). A job file that asks for more GPUs or CPUs than its workers use holds what
    it asked for, as it was priced. `use_gpu: false` holds no GPU: no worker uses one."""
    if choice is None:
        return _holds(spec, None)
    # The offer decides: a CPU offer has no GPUs to use; a GPU offer `count` GPUs on each
    # of its `nodes` (a multi-node cloud job rents num_nodes VMs).
    return _holds(spec, float(choice.count or 0) * int(choice.nodes or 1) if choice.gpu else 0.0)


def demand_on(spec: Any, gpu: Optional[str], count: float) -> Demand:
    """What a job would hold on one offer placement is pricing: `count` of its `gpu`s."""
    return _holds(spec, float(count or 0) if gpu else 0.0)


def _holds(spec: Any, priced: Optional[float]) -> Demand:
    """`priced`: the GPUs of the offer it runs on (None: none chosen yet)."""
    train = _field(spec, "train") is not None
    scaling, resources = _field(spec, "scaling"), _field(spec, "resources")
    workers = float(_least(_field(scaling, "num_workers"))) if train else 1.0
    use_gpu = _field(scaling, "use_gpu")
    use_gpu = "auto" if use_gpu is None else use_gpu
    if priced is None:
        priced = _accelerator_count(_field(resources, "accelerators"))
    # `auto` uses GPUs when there is one per worker, as the runner decides on the target
    # (and placement prices an `auto` train job on offers with a GPU per worker).
    if use_gpu is True or (use_gpu == "auto" and priced > 0 and priced >= workers):
        return Demand(0.0, max(workers, priced))
    cpus = _field(resources, "cpus")
    asked = float(str(cpus).rstrip("+")) if cpus is not None else 0.0
    return Demand(max(workers, asked), 0.0)


def _least(workers: Any) -> int:
    """The workers a job starts with at least: `num_workers`, or an elastic one's `min`
    (a stored spec's dict, or the model)."""
    if isinstance(workers, dict):
        return int(workers.get("min") or 1)
    least = getattr(workers, "min", workers)
    return int(least or 1)
