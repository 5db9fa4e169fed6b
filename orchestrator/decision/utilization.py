"""What owned GPUs really cost per hour jobs held them: the time jobs held them against the assumed."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

from orchestrator.base.targets import LOCAL, ONPREM
from orchestrator.decision.gpus import canonical_gpu
from orchestrator.decision.pricing import HOURS_PER_YEAR, fmt_money, owned_hourly
from orchestrator.records.cost import CostEntry

DIFFERS = 1.5  # real against assumed cost beyond this factor, either way, earns a sentence


@dataclass(frozen=True)
class PoolUse:
    """One owned pool (an `[[onprem]]` line, or this workstation) over the window.
    Money in USD; hours are GPU-hours (machine-hours for a workstation without GPUs)."""

    pool: str  # "onprem RTX4090 x4", "local"
    target: str  # onprem | local
    gpu: Optional[str]
    gpus: int  # in the pool; 1 for a workstation without GPUs
    unit: str  # GPU | machine
    setting: str  # where its figures are set, e.g. `[[onprem]] gpu = "RTX4090"`
    purchase_price_usd: float
    lifetime_years: float
    assumed_utilization: float
    assumed_amortized_per_gpu_hour_usd: float
    assumed_power_per_gpu_hour_usd: float
    assumed_per_gpu_hour_usd: float  # what plans price an hour of one GPU at
    window_days: float
    window_basis: str
    jobs: int = 0
    busy_gpu_hours: float = 0.0  # held by jobs (decision.measured_use: how busy while held)
    capacity_gpu_hours: float = 0.0
    utilization: Optional[float] = None  # None: no history to measure
    ownership_usd: Optional[float] = None  # purchase x window / lifetime
    power_usd: Optional[float] = None  # of the held hours
    real_per_gpu_hour_usd: Optional[float] = None  # None: no history, or nothing ran
    verdict: str = ""


@dataclass(frozen=True)
class OwnedUse:
    history: bool  # False: no recorded job, so nothing is measured
    window_days: float
    window_basis: str
    pools: tuple[PoolUse, ...]
    notes: tuple[str, ...]


def _pct(f: float) -> str:
    return f"{f * 100:.3g}%" if f >= 0.001 else f"{f * 100:.2g}%"


def _span(e: CostEntry, end: float) -> Optional[tuple[float, float]]:
    """(start, end) a job held its hardware; a running one, up to `end`."""
    began = e.started_at
    if began is None:
        return None
    return began, e.finished_at or end


def _overlap(span: tuple[float, float], start: float, end: float) -> float:
    return max(0.0, min(span[1], end) - max(span[0], start)) / 3600.0


def _union_hours(spans: Iterable[tuple[float, float]], start: float, end: float) -> float:
    """Hours in [start, end] when at least one span ran: jobs that overlap count once."""
    total, reach = 0.0, start
    for a, b in sorted((max(a, start), min(b, end)) for a, b in spans):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total / 3600.0


def _ran(jobs: Iterable[tuple[CostEntry, tuple[float, float]]], start: float, end: float) -> int:
    return sum(_overlap(s, start, end) > 0 for _, s in jobs)


def _gpus(e: CostEntry) -> float:
    return max(float(e.gpu_count or 0), 1.0)


def _pool(*, pool: str, target: str, gpu: Optional[str], gpus: int, unit: str, setting: str,
          purchase: float, lifetime: float, util: float, watts_all: float, elec: float,
          start: float, end: float, basis: str, history: bool,
          busy_of: Callable[[float], tuple[int, float]],
          money: Callable[[Optional[float]], str]) -> PoolUse:
    """`busy_of(wstart)`: (jobs, busy GPU-hours) from wstart to end; `watts_all`: the pool's."""
    am, pw = owned_hourly(purchase, lifetime, util, watts_all, elec)
    life_h = lifetime * HOURS_PER_YEAR
    wstart = max(start, end - life_h * 3600.0)
    window_h = (end - wstart) / 3600.0
    if wstart > start:
        basis = f"{basis}, capped at its {lifetime:g}-year lifetime"
    assumed = (am + pw) / gpus
    assumed_only = PoolUse(pool=pool, target=target, gpu=gpu, gpus=gpus, unit=unit,
                           setting=setting, purchase_price_usd=purchase, lifetime_years=lifetime,
                           assumed_utilization=util, assumed_amortized_per_gpu_hour_usd=am / gpus,
                           assumed_power_per_gpu_hour_usd=pw / gpus,
                           assumed_per_gpu_hour_usd=assumed, window_days=window_h / 24.0,
                           window_basis=basis)
    hour = "machine-hour" if unit == "machine" else "GPU-hour"
    if not history:
        return dataclasses.replace(assumed_only, verdict=(
            f"no job history to measure: each held {hour} costs {money(assumed)} if jobs hold "
            f"them {_pct(util)} of their {lifetime:g} years, as the settings assume"))
    jobs, busy = busy_of(wstart)
    capacity = gpus * window_h
    used = busy / capacity if capacity > 0 else 0.0
    ownership = purchase * window_h / life_h
    power = watts_all / gpus / 1000.0 * busy * elec
    real = (ownership + power) / busy if busy > 0 else None
    these = "this workstation" if target == LOCAL else "these GPUs"
    if real is None:
        verdict = (f"no job ran on {these} in the {window_h / 24:.1f} days: their "
                   f"{money(ownership)} of ownership bought no work; steady work on {these}"
                   + (", or fewer GPUs," if target == ONPREM else "") + " would put it to use")
    else:
        head = (f"jobs held them {_pct(used)} of the time against the {_pct(util)} assumed: each held {hour} "
                f"really costs {money(real)}, not {money(assumed)}")
        if real > assumed * DIFFERS:
            verdict = (f"{head}; more steady work on {these}"
                       + (", or fewer GPUs," if target == ONPREM else "") + " would lower it")
        elif real * DIFFERS < assumed:
            verdict = (f"{head}; plans price {these} too high: set utilization = "
                       f"{min(used, 1.0):.2f} in {setting} to price them as they are used")
        else:
            verdict = (f"jobs held them {_pct(used)} of the time, near the {_pct(util)} assumed: "
                       f"{money(real)} per held {hour} against {money(assumed)} assumed")
    return dataclasses.replace(assumed_only, jobs=jobs, busy_gpu_hours=busy,
                               capacity_gpu_hours=capacity, utilization=used,
                               ownership_usd=ownership, power_usd=power,
                               real_per_gpu_hour_usd=real, verdict=verdict)


def owned_use(entries: Sequence[CostEntry], onprem: Sequence, local, *, start: float, end: float,
              basis: str, electricity_price: float, local_gpus: int = 0,
              currency: str = "USD", rate: float = 1.0) -> OwnedUse:
    """Measured use and real cost per held GPU-hour of each owned pool, from `ledger.entry`
    values (target, gpu, gpu_count, started_at, finished_at; a running job counts up to `end`).

    `onprem` are the settings' `OwnedGpus` lines (CPU pools are not measured); `local` is
    `settings.local`, measured only when a job ran locally, with `local_gpus` GPUs (as
    detected; the most a local job used when more). Held time is what jobs held inside
    [start, end], capped at each pool's lifetime; `basis` says how the window was chosen."""
    money = lambda usd: fmt_money(usd, currency, rate)  # noqa: E731
    history = bool(entries)
    notes: list[str] = []
    spans = [(e, s) for e in entries if (s := _span(e, end)) is not None]
    onprem_jobs = [(e, s) for e, s in spans if e.target == ONPREM and e.gpu]
    lines = [inv for inv in onprem if not inv.cpu_pool]
    by_model: dict[str, int] = {}
    for inv in lines:
        by_model[canonical_gpu(inv.gpu)] = by_model.get(canonical_gpu(inv.gpu), 0) + inv.count
    pools: list[PoolUse] = []
    for inv in lines:
        model = canonical_gpu(inv.gpu)
        mine = [(e, s) for e, s in onprem_jobs if canonical_gpu(e.gpu) == model]
        # Lines of one model share its jobs by GPU count: a job does not say which line ran it.
        share = inv.count / by_model[model]

        def line_busy(wstart: float, mine=mine, share=share) -> tuple[int, float]:
            return (_ran(mine, wstart, end),
                    share * sum(_overlap(s, wstart, end) * _gpus(e) for e, s in mine))

        pools.append(_pool(
            pool=f"onprem {model} x{inv.count}", target=ONPREM, gpu=model, gpus=inv.count,
            unit="GPU", setting=f'[[onprem]] gpu = "{inv.gpu}"', purchase=inv.purchase_price,
            lifetime=inv.lifetime_years, util=inv.utilization, watts_all=inv.watts * inv.count,
            elec=electricity_price, start=start, end=end, basis=basis, history=history,
            busy_of=line_busy, money=money))
    shared = sorted(m for m in by_model if sum(canonical_gpu(i.gpu) == m for i in lines) > 1)
    if shared:
        notes.append(f"several [[onprem]] lines hold {', '.join(shared)}: their measured use is "
                     f"split between them by GPU count")
    stray = sorted({canonical_gpu(e.gpu) for e, _ in onprem_jobs} - set(by_model))
    if stray:
        notes.append(f"on-prem jobs on {', '.join(stray)}, which no [[onprem]] line lists, are "
                     f"not counted: add the line to measure them")

    ran_here = [(e, s) for e, s in spans if e.target == LOCAL]
    if any(e.target == LOCAL for e in entries):
        on_gpu = [(e, s) for e, s in ran_here if e.gpu]
        n = math.ceil(max([local_gpus, *(_gpus(e) for e, _ in on_gpu)]))
        if n:
            def busy_of(wstart: float) -> tuple[int, float]:
                return (_ran(on_gpu, wstart, end),
                        sum(_overlap(s, wstart, end) * _gpus(e) for e, s in on_gpu))
            if len(on_gpu) < len(ran_here):
                notes.append(f"{len(ran_here) - len(on_gpu)} CPU-only jobs on this workstation "
                             f"are not counted as GPU use")
            if n > local_gpus:
                notes.append(f"this workstation's {n} GPU{'s' if n > 1 else ''}: the most a "
                             f"local job used "
                             + ("(nvidia-smi found none)" if not local_gpus
                                else f"(nvidia-smi found {local_gpus})"))
        else:
            def busy_of(wstart: float) -> tuple[int, float]:
                # No GPUs: the machine is busy while any job runs; overlapping jobs count once.
                return (_ran(ran_here, wstart, end),
                        _union_hours((s for _, s in ran_here), wstart, end))
        models = {canonical_gpu(e.gpu) for e, _ in on_gpu}
        pools.append(_pool(
            pool=LOCAL, target=LOCAL, gpu=models.pop() if len(models) == 1 else None,
            gpus=max(n, 1), unit="GPU" if n else "machine",
            setting="[local]", purchase=local.purchase_price, lifetime=local.lifetime_years,
            util=local.utilization, watts_all=local.watts, elec=electricity_price, start=start,
            end=end, basis=basis, history=history, busy_of=busy_of, money=money))
    if any(inv.cpu_pool for inv in onprem):
        notes.append("CPU pools ([[onprem]] gpu = \"CPU\") are not measured")
    return OwnedUse(history=history, window_days=(end - start) / 86400.0, window_basis=basis,
                    pools=tuple(pools), notes=tuple(notes))
