"""How busy owned GPUs were while jobs held them (the runner's NVML telemetry), and so what
a useful GPU-hour of each owned pool really costs.

`utilization.owned_use` says how many GPU-hours jobs held each pool; here each job's
telemetry summary (jobs/telemetry.py `combine`, kept as `RunMetrics.telemetry.summary`)
says how busy its GPUs were over those hours. Only NVML figures are GPU use: a `psutil`
summary is a CPU worker's share of its threads and is left out (counted, not measured). A
job without a summary (a `run:` job, a running one, one recorded before telemetry) is
unmeasured: it lowers the coverage and never counts as idle or as busy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence, Union

from orchestrator.base.targets import LOCAL
from orchestrator.decision.gpus import canonical_gpu
from orchestrator.decision.pricing import fmt_money
from orchestrator.decision.utilization import DIFFERS, OwnedUse, PoolUse
from orchestrator.records.cost import CostEntry
from orchestrator.records.metrics import RunMetrics

# Under this busy share a useful GPU-hour costs 1.5x (DIFFERS) a held one or more, the
# factor at which advise already calls two costs different; a compute-bound training loop
# keeps NVML utilization near 90-100%, so below two thirds the GPUs wait a third of the
# time they are held: the jobs, not the number of GPUs, are what to fix first.
FIX_JOBS_BELOW = 1.0 / DIFFERS
# Advice needs the measured jobs to be most of the pool's held hours, not a sample of a few.
MIN_COVERAGE = 0.5
ROOMY_MEMORY = 0.5  # a run that peaked under half its GPU's memory has room for a larger batch


@dataclass(frozen=True)
class RunTelemetry:
    """A finished run's device summary as orch keeps it (jobs/telemetry.py `combine`)."""

    source: str  # nvml: GPU utilization; psutil: a CPU worker's share of its threads
    mean_util: float  # percent, the mean over the run and its workers
    seconds: float  # the sampled span of the run
    workers: Optional[int] = None
    peak_mem_gb: Optional[float] = None
    mem_total_gb: Optional[float] = None

    @classmethod
    def of(cls, metrics: Union[RunMetrics, Mapping]) -> Optional[RunTelemetry]:
        """The summary in a job's metrics, or None where there is none or it is malformed."""
        s = RunMetrics.read(metrics).summary()
        if s is None:
            return None
        util, secs = _number(s.mean_util), _number(s.seconds)
        if util is None or secs is None or s.source is None:
            return None
        workers = _number(s.workers)
        return cls(source=s.source, mean_util=min(max(util, 0.0), 100.0), seconds=secs,
                   workers=None if workers is None else int(workers),
                   peak_mem_gb=_number(s.peak_mem_gb), mem_total_gb=_number(s.mem_total_gb))


def _number(v: object) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


@dataclass(frozen=True)
class MeasuredPool:
    """One owned pool's held GPU-hours, how busy its GPUs were over them, and the cost of a
    useful GPU-hour. Money in USD; `basis` says where each figure comes from."""

    pool: str  # as in owned_use's pools
    target: str
    held_gpu_hours: float  # what jobs held in the window (owned_use's busy_gpu_hours)
    measured_gpu_hours: float = 0.0  # of them, covered by NVML telemetry
    coverage: Optional[float] = None  # measured / held; None: nothing was held
    measured_busy_share: Optional[float] = None  # None: unmeasured
    jobs: int = 0
    measured_jobs: int = 0
    cpu_telemetry_jobs: int = 0  # telemetry from psutil (CPU): not GPU use, left out
    unmeasured_jobs: int = 0  # no telemetry: running, `run:` jobs, older records
    input_bound_jobs: int = 0  # measured jobs whose verdict says they wait on data
    cost_per_held_gpu_hour_usd: Optional[float] = None
    cost_per_useful_gpu_hour_usd: Optional[float] = None
    fix_jobs_first: bool = False
    verdict: str = ""
    advice: tuple[str, ...] = ()
    basis: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MeasuredUse:
    pools: tuple[MeasuredPool, ...]
    fix_jobs_below: float
    min_coverage: float
    buy_condition: str  # "": no pool's jobs need fixing first
    assumptions: tuple[str, ...]


@dataclass
class _Tally:
    held: float = 0.0  # GPU-hours in the window, every job
    measured: float = 0.0  # of them, covered by NVML telemetry
    busy: float = 0.0  # measured GPU-hours x busy share
    jobs: int = 0
    measured_jobs: int = 0
    cpu: int = 0
    unmeasured: int = 0
    running: int = 0
    input_bound: int = 0
    fp32: int = 0
    precision_known: int = 0
    roomiest: Optional[float] = None  # the lowest peak share of GPU memory a measured job used


def _runs_on(pool: PoolUse, e: CostEntry) -> bool:
    """owned_use's rule: on-prem GPU jobs by model, this workstation's GPU jobs."""
    if e.target != pool.target or not e.gpu:
        return False
    return pool.target == LOCAL or canonical_gpu(e.gpu) == pool.gpu


def _tally(pool: PoolUse, entries: Sequence[CostEntry], by_job: Mapping[str, Union[RunMetrics, Mapping]],
           end: float) -> _Tally:
    t = _Tally()
    wstart = end - pool.window_days * 86400.0
    for e in entries:
        if e.started_at is None or not _runs_on(pool, e):
            continue
        stop = e.finished_at or end
        gpus = max(float(e.gpu_count or 0), 1.0)
        held = max(0.0, min(stop, end) - max(e.started_at, wstart)) / 3600.0 * gpus
        if held <= 0:
            continue
        t.jobs += 1
        t.held += held
        m = RunMetrics.read(by_job.get(e.id or ""))
        tel = RunTelemetry.of(m)
        if tel is not None and tel.source != "nvml":
            t.cpu += 1
            continue
        if tel is None:
            t.unmeasured += 1
            t.running += e.finished_at is None
            continue
        # The sampler runs inside training: start-up before it, and ranks that sent no
        # summary, stay unmeasured rather than counted at the sampled figure.
        length = max(stop - e.started_at, 1e-9)
        ranks = min(1.0, (tel.workers or gpus) / gpus)
        covered = held * min(1.0, tel.seconds / length) * ranks
        t.measured += covered
        t.busy += covered * tel.mean_util / 100.0
        t.measured_jobs += 1
        t.input_bound += m.verdict is not None and m.verdict.kind == "input-bound"
        precision = (m.run_settings.precision if m.run_settings else None) or \
            m.reported().get("precision")
        t.precision_known += isinstance(precision, str)
        t.fp32 += precision == "fp32"
        if tel.peak_mem_gb is not None and tel.mem_total_gb:
            share = tel.peak_mem_gb / tel.mem_total_gb
            t.roomiest = share if t.roomiest is None else min(t.roomiest, share)
    return t


def _pct(f: float) -> str:
    return f"{f:.0%}" if f >= 0.01 or f == 0 else f"{f:.1%}"


def _fixes(t: _Tally) -> tuple[str, ...]:
    """What to change in the jobs, from their own verdicts and settings where they say."""
    out = []
    if t.input_bound:
        out.append(f"{t.input_bound} of the {t.measured_jobs} measured jobs wait on data (their "
                   f"verdict: input-bound): data.loader_workers: auto (or more workers) and "
                   f"data.pin_memory: true")
    if t.fp32:
        out.append(f"{t.fp32} ran in fp32: precision: auto (bf16 where the GPU has it)")
    elif t.precision_known < t.measured_jobs:
        out.append("precision: auto (bf16 where the GPU has it) for jobs that run in fp32")
    roomy = t.roomiest is not None and t.roomiest < ROOMY_MEMORY
    out.append("a larger batch per GPU" + (f": a measured job peaked at {_pct(t.roomiest or 0)} "
                                           f"of its GPU's memory" if roomy else " if memory allows"))
    return tuple(out)


def _measure(pool: PoolUse, t: _Tally, money) -> MeasuredPool:
    held = pool.busy_gpu_hours
    per_held = pool.real_per_gpu_hour_usd
    basis = {
        "held_gpu_hours": "measured: each job's run window in orch's records x its GPUs, "
                          "inside the window",
        "measured_busy_share": "measured: NVML utilization the runner sampled on each GPU "
                               "(orch's telemetry), weighted by the GPU-hours it covered",
        "cost_per_held_gpu_hour_usd": f"settings over measured hours: ownership of the window "
                                      f"(purchase x window / lifetime, from {pool.setting}) + "
                                      f"rated watts x held hours x electricity_price, over the "
                                      f"held GPU-hours",
        "cost_per_useful_gpu_hour_usd": "cost per held GPU-hour / measured busy share",
    }
    out = MeasuredPool(pool=pool.pool, target=pool.target, held_gpu_hours=held,
                       cost_per_held_gpu_hour_usd=per_held, basis=basis)
    if pool.unit != "GPU":
        return _replace(out, jobs=pool.jobs, verdict=(
            "no GPUs here: a CPU job's telemetry (psutil) is its CPU share, not GPU use, so no "
            "busy share is measured"))
    if t.held <= 0:
        return _replace(out, verdict="no job held these GPUs in the window: nothing to measure")
    coverage = t.measured / t.held
    share = t.busy / t.measured if t.measured > 0 else None
    useful = per_held / share if per_held is not None and share else None
    out = _replace(out, jobs=t.jobs, measured_jobs=t.measured_jobs, cpu_telemetry_jobs=t.cpu,
                   unmeasured_jobs=t.unmeasured, input_bound_jobs=t.input_bound,
                   coverage=coverage, measured_gpu_hours=held * coverage,
                   measured_busy_share=share, cost_per_useful_gpu_hour_usd=useful)
    why = []
    if t.unmeasured:
        why.append(f"{t.unmeasured} job{'s' if t.unmeasured > 1 else ''} without telemetry"
                   + (f", {t.running} of them still running" if t.running else ""))
    if t.cpu:
        why.append(f"{t.cpu} with only CPU telemetry, not GPU use")
    gaps = f": {'; '.join(why)}" if why else ""
    if share is None:
        return _replace(out, verdict=(
            f"unmeasured: no NVML telemetry covers the {held:,.1f} GPU-hours jobs held"
            + (f" ({'; '.join(why)})" if why else "") + "; "
            f"how busy they were is unknown, and each held GPU-hour costs {money(per_held)}"))
    cost = (f"each useful GPU-hour costs {money(useful)}, each held one {money(per_held)}"
            if useful is not None else f"no useful GPU-hour for {money(per_held)} a held one")
    head = (f"busy {_pct(share)} of the {held:,.1f} GPU-hours jobs held them (measured over "
            f"{_pct(coverage)} of them{gaps}): {cost}")
    if share >= FIX_JOBS_BELOW:
        return _replace(out, verdict=head)
    if coverage < MIN_COVERAGE:
        return _replace(out, verdict=(
            f"{head}; too little of the held time is measured to judge the jobs: run them as "
            f"`train:` jobs, whose runner measures the GPUs, before buying"))
    return _replace(out, fix_jobs_first=True, advice=_fixes(t), verdict=(
        f"{head}; "
        + (f"held {1 / share:.1f}x the hours the GPUs were busy" if share else "held, never busy")
        + ": fix the jobs before buying more GPUs"))


def _replace(p: MeasuredPool, **kw) -> MeasuredPool:
    return dataclasses.replace(p, **kw)


def measured_use(use: OwnedUse, entries: Sequence[CostEntry],
                 metrics: Mapping[str, Union[RunMetrics, Mapping]],
                 *, end: float, currency: str = "USD", rate: float = 1.0) -> MeasuredUse:
    """Each of `use`'s pools with how busy its GPUs were while jobs held them. `entries` are
    the ledger entries owned_use read (running jobs up to `end`); `metrics` the jobs' metrics
    by job id, where the telemetry summary, the verdict and the run's settings are."""
    money = lambda usd: fmt_money(usd, currency, rate)  # noqa: E731
    pools = tuple(_measure(p, _tally(p, entries, metrics, end), money) for p in use.pools)
    flagged = [p for p in pools if p.fix_jobs_first]
    condition = ""
    if flagged:
        condition = "only once the jobs are fixed: " + "; ".join(
            f"{p.pool} was busy {_pct(p.measured_busy_share or 0)} of the GPU-hours jobs held it"
            for p in flagged)
    assumptions = (
        "owned GPUs' busy share: NVML utilization each job's workers sampled (their telemetry, "
        "not signed: what the job's own processes report), weighted by the GPU-hours it "
        "covered; a job without NVML telemetry is unmeasured (coverage), never idle or busy, "
        "and CPU telemetry (psutil) is left out; NVML counts a GPU busy while any kernel runs, "
        "so the share is an upper bound of useful work",
        f"fix the jobs before buying: a pool busy under {FIX_JOBS_BELOW:.0%} of its held hours "
        f"(a useful GPU-hour then costs {DIFFERS:g}x a held one or more), with at least "
        f"{MIN_COVERAGE:.0%} of them measured",
    ) if use.pools and use.history else ()
    return MeasuredUse(pools=pools, fix_jobs_below=FIX_JOBS_BELOW, min_coverage=MIN_COVERAGE,
                       buy_condition=condition, assumptions=assumptions)
