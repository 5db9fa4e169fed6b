"""`orch serve`'s /metrics in Prometheus's text format: the service's snapshot of the store
(service.metrics_snapshot) as gauges, made afresh at each scrape by one custom collector
(prometheus_client), so nothing is kept between scrapes and a job that ended leaves no
series behind. Per-job series are for running jobs only (their number is bounded by what
the hardware runs at once); a label holds an id, a job's name, a target, a kind, a rank, a
state or a part, never a value from a job's environment.
"""

from __future__ import annotations

from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from orchestrator.service.metrics_snapshot import RunningJob, Snapshot

# The text format Prometheus and promtool have read since 2014; what generate_latest writes
# for names that need no quoting, as all of orch's do.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_JOB = ["job_id", "name", "target", "kind"]


def exposition(read: Callable[[], Snapshot]) -> bytes:
    """The text Prometheus scrapes: `read()` called once, now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(read))
    return generate_latest(registry)


class SnapshotCollector(Collector):
    """Gauges from one snapshot per collect(); `read` is the store's read (blocking)."""

    def __init__(self, read: Callable[[], Snapshot]):
        self.read = read

    def describe(self) -> list:
        return []  # registering it reads nothing

    def collect(self) -> Iterator[GaugeMetricFamily]:
        return families(self.read())


def families(snap: Snapshot) -> Iterator[GaugeMetricFamily]:
    """Every metric of the snapshot (docs/serve.md lists them with example queries)."""
    jobs = _gauge("orch_jobs", "Jobs in orch's store by state, target and kind (ended ones too)",
                  ["state", "target", "kind"])
    for c in snap.jobs:
        jobs.add_metric([c.status, c.target or "none", c.kind or "none"], c.n)
    yield jobs
    length = _gauge("orch_queue_length", "Jobs waiting in orch serve's queue, by target", ["target"])
    wait = _gauge("orch_queue_oldest_wait_seconds", "How long the oldest job in a target's "
                  "queue has waited (0: none waits)", ["target"])
    for q in snap.queue:
        length.add_metric([q.target], q.length)
        wait.add_metric([q.target], q.oldest_wait_s)
    yield length
    yield wait
    spend = _gauge("orch_month_spend_usd", "This calendar month's (UTC) spend so far in USD, by "
                   "part: cloud (bills) and owned_power are cash; owned_amortized is owned "
                   "hardware's purchase", ["part"])
    for part, usd in snap.spend_usd.items():
        spend.add_metric([part], usd)
    yield spend
    counted = _gauge("orch_month_budget_spend_usd", "This month's spend so far as the monthly "
                     "budget counts it (budget_basis: cash or full), USD", ["basis"])
    counted.add_metric([snap.budget_basis], snap.budget_spend_usd)
    yield counted
    budget = _gauge("orch_monthly_budget_usd", "monthly_budget in USD (no series: no budget)",
                    ["basis"])
    if snap.budget_usd is not None:
        budget.add_metric([snap.budget_basis], snap.budget_usd)
    yield budget
    yield from _running(snap.running)
    yield from _owned(snap)


def _running(running: tuple[RunningJob, ...]) -> Iterator[GaugeMetricFamily]:
    util = _gauge("orch_job_device_utilization_ratio", "A running job's device busy share (0-1) "
                  "per worker: the mean of its last telemetry_point_seconds; source nvml is a "
                  "GPU, psutil the worker's CPU", _JOB + ["rank", "source"])
    mem = _gauge("orch_job_device_memory_bytes", "Memory a running job's worker uses on its "
                 "device (a GPU's, else its process's resident set), at most over its last point",
                 _JOB + ["rank", "source"])
    power = _gauge("orch_job_device_power_watts", "A running job's GPU power draw per worker "
                   "(NVML), mean over its last point", _JOB + ["rank"])
    speed = _gauge("orch_job_samples_per_second", "A running job's throughput at its last report",
                   _JOB)
    cost = _gauge("orch_job_cost_so_far_usd", "A running job's cost so far in USD, in full: "
                  "a cloud job's bill; owned hardware's amortized purchase and power", _JOB)
    cash = _gauge("orch_job_cash_so_far_usd", "A running job's cost so far as a cash budget "
                  "counts it, USD: a cloud job's bill; owned hardware's power", _JOB)
    gpus = _gauge("orch_job_gpus", "GPUs a running job holds", _JOB)
    for j in running:
        job = [j.id, j.name, j.target, j.kind]
        for p in j.devices:
            util.add_metric(job + [p.rank, p.source], p.util_percent / 100.0)
            mem.add_metric(job + [p.rank, p.source], p.mem_bytes)
            if p.power_watts is not None:
                power.add_metric(job + [p.rank], p.power_watts)
        if j.samples_per_second is not None:
            speed.add_metric(job, j.samples_per_second)
        cost.add_metric(job, j.cost_usd)
        cash.add_metric(job, j.cash_usd)
        gpus.add_metric(job, j.gpus)
    yield from (util, mem, power, speed, cost, cash, gpus)


def _owned(snap: Snapshot) -> Iterator[GaugeMetricFamily]:
    in_use = _gauge("orch_owned_gpus_in_use", "Owned GPUs that running jobs hold, by target",
                    ["target"])
    total = _gauge("orch_owned_gpus", "Owned GPUs in all, by target: this machine's (nvidia-smi) "
                   "and the [[onprem]] inventory's (no series: not known)", ["target"])
    util = _gauge("orch_owned_gpu_utilization_ratio", "Owned GPUs' busy share (0-1) as NVML "
                  "measures it, the mean over running jobs' workers (no series: none measured)",
                  ["target"])
    for o in snap.owned:
        in_use.add_metric([o.target], o.in_use)
        if o.total is not None:
            total.add_metric([o.target], o.total)
        if o.utilization_percent is not None:
            util.add_metric([o.target], o.utilization_percent / 100.0)
    yield from (in_use, total, util)


def _gauge(name: str, documentation: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=labels)

