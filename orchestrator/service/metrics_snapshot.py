"""What `orch serve`'s /metrics reports, as one typed snapshot of the store: jobs by state,
target and kind; the queue; the month's spend and the budget; each running job's device,
throughput and cost so far; the owned GPUs in use and how busy they measure.

`read` asks the store three things, however many jobs it holds: the counts, grouped in SQL;
the rows the month's spend is read from (spending.month_rows: this month's jobs and every
unfinished one); and the queue. `build` derives the rest from them in one pass, with no I/O.
Nothing asks a backend: the figures are the store's, as fresh as the scheduler's last pass
(`serve_period_s`) and the running jobs' last device points (`telemetry_point_seconds`).
Money is in USD; owned hardware is never free (a job's cost is its amortized purchase and
power), and what the monthly budget counts is the cash (or full) figure budget_basis names.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from orchestrator.base.targets import LOCAL, ONPREM, OWNED, TARGETS
from orchestrator.decision import job_ledger as ledger
from orchestrator.decision.demand import job_demand
from orchestrator.records import JobRow
from orchestrator.records.cost import CostEntry
from orchestrator.records.metrics import WorkerPoint
from orchestrator.service.core import Core
from orchestrator.settings import Settings
from orchestrator.store import JobCount

GiB = float(2**30)
SOURCES = ("nvml", "psutil")  # what measured a device point: a GPU (NVML), a worker's CPU
_MAX_RANKS = 4096  # a running job's points come from its workers' log lines: bounded


@dataclass(frozen=True)
class DevicePoint:
    """A worker's latest device point: its mean over the last telemetry_point_seconds."""
    rank: str
    source: str  # "nvml", "psutil", or "unknown" (a runner from before points said)
    util_percent: float
    mem_bytes: float
    power_watts: Optional[float] = None


@dataclass(frozen=True)
class RunningJob:
    id: str
    name: str
    target: str
    kind: str
    gpus: float  # what it holds (decision.demand, the queue's own rule)
    cost_usd: float  # so far, in full: a cloud job's bill, owned hardware's purchase and power
    cash_usd: float  # so far, as a cash budget counts it
    samples_per_second: Optional[float]  # its last report's throughput
    devices: tuple[DevicePoint, ...] = ()


@dataclass(frozen=True)
class QueueLine:
    """One target's line in `orch serve`'s queue."""
    target: str
    length: int
    oldest_wait_s: float  # 0 when empty


@dataclass(frozen=True)
class OwnedGpus:
    """An owned target's GPUs: in use by running jobs, and how busy NVML measures them."""
    target: str
    in_use: float
    total: Optional[float]  # where known without asking the backend (settings, nvidia-smi)
    utilization_percent: Optional[float]  # the mean of its running jobs' GPU points; None: none


@dataclass(frozen=True)
class Snapshot:
    jobs: tuple[JobCount, ...]
    queue: tuple[QueueLine, ...]
    spend_usd: dict[str, float]  # the month's, by job_ledger.SPEND_PARTS
    budget_basis: str
    budget_spend_usd: float  # what the monthly budget counts (budget_basis)
    budget_usd: Optional[float]  # monthly_budget in USD; None: no budget
    running: tuple[RunningJob, ...]
    owned: tuple[OwnedGpus, ...]


def read(core: Core) -> Snapshot:
    """The snapshot now, from the core's store."""
    from orchestrator.service.spending import month_rows

    store, now = core.store, core.clock()
    return build(store.counts(), month_rows(store, now), store.queued(), now,
                 core.settings, local_gpus())


@functools.lru_cache(maxsize=1)
def local_gpus() -> int:
    """This machine's NVIDIA GPUs, read once per process (nvidia-smi): they do not come and go."""
    from orchestrator.offers.local import detect_gpus

    return sum(detect_gpus().values())


def build(counts: Sequence[JobCount], month: Sequence[JobRow], queued: Sequence[JobRow],
          now: float, settings: Settings, local_gpus: Optional[int] = None) -> Snapshot:
    """The snapshot from what `read` asked the store (pure). `month`: spending.month_rows,
    which holds every unfinished job; `queued`: store.queued()."""
    entries = {r.id: ledger.entry(r, now) for r in month}
    running = tuple(_running(r, entries[r.id]) for r in month if r.status == "RUNNING")
    budget = settings.monthly_budget / settings.currency_rate if settings.monthly_budget else None
    return Snapshot(
        jobs=tuple(counts), queue=_queue(queued, now),
        spend_usd=ledger.month_parts(entries.values(), now), budget_basis=settings.budget_basis,
        budget_spend_usd=ledger.month_spend(entries.values(), now, settings.budget_basis),
        budget_usd=budget, running=running, owned=_owned(running, settings, local_gpus))


def _queue(queued: Sequence[JobRow], now: float) -> tuple[QueueLine, ...]:
    """Each target's line (every known target, an empty line too, so a query sees a 0)."""
    oldest: dict[str, list[float]] = {t: [] for t in TARGETS}
    for r in queued:
        oldest.setdefault(r.target or "none", []).append(r.created_at)
    return tuple(QueueLine(t, len(ts), max(0.0, now - min(ts)) if ts else 0.0)
                 for t, ts in sorted(oldest.items()))


def _running(rec: JobRow, entry: CostEntry) -> RunningJob:
    metrics = rec.metrics
    return RunningJob(id=rec.id, name=rec.name, target=rec.target or "none", kind=rec.kind or "none",
                      gpus=job_demand(rec.spec, rec.choice).gpus, cost_usd=entry.cost_usd,
                      cash_usd=ledger.spend(entry, "cash"),
                      samples_per_second=_number(metrics.number("samples_per_sec")),
                      devices=_points(metrics.device_now or {}))


def _points(device_now: dict[str, WorkerPoint]) -> tuple[DevicePoint, ...]:
    """The workers' latest points, as far as they are well formed: they come from lines the
    job's own workers print, so a rank is a small number and a figure a finite one, or the
    point is left out; a utilization is held within 0-100%, memory and power at 0 or more."""
    out = []
    for rank, p in sorted(device_now.items(), key=lambda kv: (len(kv[0]), kv[0])):
        if not (rank.isdigit() and int(rank) < _MAX_RANKS):
            continue
        util, mem = _number(p.util), _number(p.mem_gb)
        if util is None or mem is None:
            continue
        source = p.source if p.source in SOURCES and p.source else "unknown"
        power = _number(p.power_w)
        out.append(DevicePoint(rank, source, min(100.0, max(0.0, util)), max(0.0, mem) * GiB,
                               None if power is None else max(0.0, power)))
    return tuple(out)


def _owned(running: Sequence[RunningJob], settings: Settings,
           local_gpus: Optional[int]) -> tuple[OwnedGpus, ...]:
    """Each owned target's GPUs in use and their measured utilization (NVML's points only:
    a CPU's figure is never taken for a GPU's). In all: this machine's (`local_gpus`), and
    the cluster's as the [[onprem]] inventory lists them, when it does."""
    inventory = float(sum(inv.count for inv in settings.onprem if not inv.cpu_pool))
    totals = {LOCAL: None if local_gpus is None else float(local_gpus),
              ONPREM: inventory if settings.onprem else None}
    out = []
    for t in sorted(OWNED):
        jobs = [j for j in running if j.target == t]
        utils = [p.util_percent for j in jobs for p in j.devices if p.source == "nvml"]
        out.append(OwnedGpus(t, sum(j.gpus for j in jobs), totals.get(t),
                             round(sum(utils) / len(utils), 3) if utils else None))
    return tuple(out)


def _number(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)

