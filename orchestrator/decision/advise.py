"""Buy-vs-rent advice: how much steady work there is, what it cost, and when a GPU pays back."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable, Mapping, Optional, Sequence

from orchestrator.base.targets import ONPREM, rented
from orchestrator.decision.candidates import (
    HOURS_PER_MONTH,
    CandidateAdvice,
    WhatIf,
    cheapest_work,
    money,
    price_candidate,
)
from orchestrator.decision.gpus import relative_speed
from orchestrator.decision.job_ledger import entry as ledger_entry
from orchestrator.decision.measured_use import MeasuredUse, measured_use
from orchestrator.decision.models import Offer
from orchestrator.decision.utilization import OwnedUse, owned_use
from orchestrator.records import CostEntry, JobRow

DAYS_PER_MONTH = 30.44
_DAY = 86400.0


@dataclass
class Work:
    """Finished jobs added up: wall hours, physical GPU-hours, H100-hours, cost in USD."""

    jobs: int = 0
    wall_hours: float = 0.0
    gpu_hours: float = 0.0
    ref_gpu_hours: float = 0.0
    cost_usd: float = 0.0

    def add(self, hours: float, gpu_hours: float, ref: Optional[float], cost: float) -> None:
        self.jobs += 1
        self.wall_hours += hours
        self.gpu_hours += gpu_hours
        self.ref_gpu_hours += ref or 0.0
        self.cost_usd += cost

    def per_month(self, months: float) -> dict:
        return {k: getattr(self, k) / months
                for k in ("wall_hours", "gpu_hours", "ref_gpu_hours", "cost_usd")}


@dataclass
class Advice:
    currency: str
    currency_rate: float
    days: float  # the window asked for
    history_days: float  # the window used: shorter when the history is
    months: float
    start: float
    end: float
    running_jobs: int
    steady: Work
    exploratory: Work
    by_target: dict[str, dict]
    steady_ref_hours_per_month: float  # the figure the candidates are priced on
    measured_steady_ref_hours_per_month: float
    paid_per_ref_hour_usd: Optional[float]
    paid_basis: str
    owned: Optional[dict]
    electricity_price: float
    utilization_cap: float
    candidates: list[CandidateAdvice]
    what_if: dict
    assumptions: list[str]
    missing: list[str]
    # Each owned pool's held time and real cost per held GPU-hour, against the assumed.
    owned_use: Optional[OwnedUse] = None
    # How busy those pools' GPUs were while jobs held them, and a useful GPU-hour's cost.
    measured_use: Optional[MeasuredUse] = None

    def to_dict(self) -> dict:
        """The `orch advise --json` shape: money in USD (`*_usd`), `currency_rate` converts."""
        d = asdict(self)
        for k in ("start", "end"):
            d[k] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(d[k]))
        d["steady"]["per_month"] = self.steady.per_month(self.months)
        d["exploratory"]["per_month"] = self.exploratory.per_month(self.months)
        return d


def _ref_hours(entry: CostEntry, speeds: Mapping[str, float]) -> Optional[float]:
    """H100-hours of one job: its hours x devices x relative speed; None if the speed is unknown."""
    speed = relative_speed(entry.gpu, speeds)
    if speed is None:
        return None
    if entry.gpu is None:
        return entry.hours * speed  # a CPU job: one machine
    return entry.gpu_hours * speed


def _kind(rec: JobRow) -> str:
    kind = rec.kind or (rec.decision.kind if rec.decision else None)
    return "steady" if kind == "steady" else "exploratory"



def advise(records: Sequence[JobRow], settings, offers: Sequence[Offer], now: float, *,
           days: float = 90.0, what_if: Optional[WhatIf] = None,
           cost_entry: Callable[[JobRow, float], CostEntry] = ledger_entry,
           catalog_problem: Optional[str] = None, local_gpus: int = 0) -> Advice:
    """Buy-vs-rent advice from the job history (`Store.list()` records), the settings
    (candidates, owned GPUs, electricity price, speeds) and the cloud offers.
    `cost_entry(rec, now)` prices a job (`orchestrator.decision.job_ledger.entry`, what `orch cost`
    shows); `catalog_problem` says why `offers` is empty, when the caller knows;
    `local_gpus`: the GPUs this workstation has, for what its use really costs."""
    what_if = what_if or WhatIf()
    speeds = settings.gpu_speeds
    first = min((r.created_at for r in records if r.created_at is not None), default=None)
    span = days if first is None else min(days, max((now - first) / _DAY, 1.0))
    start = now - span * _DAY
    months = span / DAYS_PER_MONTH
    work = {"steady": Work(), "exploratory": Work()}
    by_target: dict[str, dict] = {}
    cloud = {"steady": Work(), "any": Work()}
    onprem_busy = 0.0
    running = unpriced = 0
    unknown_speed: set[str] = set()
    entries = []  # every job that may have held hardware, running ones too: owned GPUs' use
    for rec in records:
        if rec.status == "PENDING":
            continue
        # What the job cost, as `orch cost` counts it; its work is the time it held the
        # hardware (billed start-up is cost, not work).
        entry = cost_entry(rec, now)
        entries.append(entry)
        if rec.status == "RUNNING":
            running += 1
            continue
        began, ended = entry.started_at, entry.finished_at
        if ended is None or ended < start:
            continue
        began = ended if began is None else began
        length = ended - began
        # Only the part of a job inside the window counts.
        frac = 1.0 if length <= 0 else (ended - max(began, start)) / length
        count = float(entry.gpu_count or 0) if entry.gpu else 0.0
        hours = length / 3600.0 * frac
        gpu_hours = hours * count
        entry = entry.model_copy(update={"hours": hours, "gpu_hours": gpu_hours})
        if not entry.cost_usd:
            unpriced += hours > 0
        cost = (entry.cost_usd or 0.0) * frac
        ref = _ref_hours(entry, speeds)
        if ref is None:
            unknown_speed.add(str(entry.gpu))
        kind = _kind(rec)
        work[kind].add(hours, gpu_hours, ref, cost)
        target = entry.target or "unknown"
        row = by_target.setdefault(target, {"jobs": 0, "wall_hours": 0.0, "ref_gpu_hours": 0.0,
                                            "cost_usd": 0.0, "steady_cost_usd": 0.0})
        row["jobs"] += 1
        row["wall_hours"] += hours
        row["ref_gpu_hours"] += ref or 0.0
        row["cost_usd"] += cost
        row["steady_cost_usd"] += cost if kind == "steady" else 0.0
        if rented(entry.target) and ref:
            cloud["any"].add(hours, gpu_hours, ref, cost)
            if kind == "steady":
                cloud["steady"].add(hours, gpu_hours, ref, cost)
        if target == ONPREM and entry.gpu:
            onprem_busy += gpu_hours
    for row in by_target.values():
        row["cost_per_month_usd"] = row["cost_usd"] / months

    owned_gpus = sum(inv.count for inv in settings.onprem if not inv.cpu_pool)
    owned = None
    if owned_gpus:
        window_h = span * 24.0
        owned = {"gpus": owned_gpus, "busy_gpu_hours": onprem_busy, "window_hours": window_h,
                 "utilization": onprem_busy / (owned_gpus * window_h)}

    elec = settings.electricity_price if what_if.electricity_price is None else what_if.electricity_price
    use = owned_use(entries, settings.onprem, settings.local, start=start, end=now,
                    basis=(f"the {span:.1f} days since the first recorded job" if span < days
                           else f"the last {days:g} days (--days)"),
                    electricity_price=elec, local_gpus=local_gpus,
                    currency=settings.currency, rate=settings.currency_rate)

    paid, paid_basis = None, ""
    for key, label in (("steady", "steady cloud work"), ("any", "cloud work")):
        if cloud[key].ref_gpu_hours > 0:
            paid, paid_basis = cloud[key].cost_usd / cloud[key].ref_gpu_hours, label
            break

    measured = work["steady"].ref_gpu_hours / months
    ref_per_month = measured if what_if.steady_hours is None else what_if.steady_hours
    cap = 1.0 if what_if.utilization_cap is None else what_if.utilization_cap
    candidates = [price_candidate(c, settings, offers, ref_per_month, elec, cap, what_if, paid, paid_basis)
                  for c in settings.candidates]
    busy = measured_use(use, entries, {r.id: r.metrics for r in records}, end=now,
                        currency=settings.currency, rate=settings.currency_rate)
    fix = busy.buy_condition + (", and the measured steady work counts held hours, busy or not"
                                if busy.buy_condition and what_if.steady_hours is None else "")
    for c in candidates:  # buying more GPUs does not fix jobs that leave them idle
        c.condition = fix if c.verdict == "buy" else ""

    best = cheapest_work(offers, speeds)
    assumptions = [
        f"history: the {span:.1f} days to now ({months:.2f} months of {DAYS_PER_MONTH} days)"
        + (f"; it is shorter than --days {days:g}, so monthly figures are scaled from it"
           if span < days else ""),
        "steady work: "
        + (f"{ref_per_month:,.1f} H100-hours a month from --steady-hours (measured: {measured:,.1f})"
           if what_if.steady_hours is not None else
           f"{measured:,.1f} H100-hours a month measured over {work['steady'].jobs} finished jobs, "
           f"wherever they ran, work on GPUs you own included"),
        "H100-hours: hours x GPUs x relative speed (H100 = 1.0; orch's table of dense bf16 "
        "throughput, gpu_speeds and a candidate's `speed` override it); work splits evenly "
        "over a candidate's GPUs",
        "rent: the cheapest on-demand offer of the candidate's GPU model and count in the "
        "catalogs (spot is not counted: steady work must finish), else what cloud work paid "
        "per H100-hour" + (f" ({money(settings, paid)} over {paid_basis})" if paid is not None else ""),
        "buy only if it also pays back within its lifetime against the on-demand offer that "
        "rents an H100-hour cheapest" + (f" ({best[1].cloud} {best[1].gpu} x{best[1].count:g}: "
                                         f"{money(settings, best[0])})" if best else "")
        + (" (not with --rent-price)" if what_if.rent_price is not None else ""),
        f"capacity: a candidate runs at most {HOURS_PER_MONTH * cap:,.0f} h a month "
        f"({HOURS_PER_MONTH:g} h x utilization cap {cap:g}); the rest stays rented",
        f"power: watts x GPUs x hours run x {elec:g} USD/kWh; the host's share is in the "
        "candidate's watts",
        "buying costs the purchase price and power only: no maintenance, space, resale value "
        "or interest",
        "a job's cost is what `orch cost` counts: cloud, its billed launches, recoveries and "
        "start-ups; owned hardware, amortized purchase + power for the hours it held it",
    ]
    if use.pools and use.history:
        assumptions.append(
            "owned GPUs' real cost per held GPU-hour: (purchase x window / lifetime + power of the "
            "held hours) / the GPU-hours jobs held them, running jobs up to now; the assumed "
            "figure spreads the purchase over the lifetime at the `utilization` setting")
    assumptions.extend(busy.assumptions)
    if unknown_speed:
        assumptions.append(f"jobs on {', '.join(sorted(unknown_speed))} have no speed figure and "
                           f"are left out of the H100-hours (add them to gpu_speeds)")
    if unpriced:
        assumptions.append(f"{unpriced} jobs that ran have no recorded cost and count as free")
    if running:
        assumptions.append(f"{running} running jobs are not counted until they finish")

    missing = []
    if not work["steady"].jobs and not work["exploratory"].jobs:
        missing.append(f"no finished jobs in the last {days:g} days: run jobs with orch, or say "
                       f"how much steady work there is with --steady-hours (H100-hours a month)")
    if not settings.candidates:
        missing.append("no GPUs to buy in the settings: add a [[candidates]] table "
                       "(gpu, count, purchase_price, watts, lifetime_years) to the settings file")
    if not offers and what_if.rent_price is None:
        missing.append((catalog_problem or "no cloud price catalog")
                       + ": set ORCH_CLOUDS (and ORCH_CATALOG_DIR) to price renting, or give "
                       "--rent-price")
    return Advice(currency=settings.currency, currency_rate=settings.currency_rate, days=days,
                  history_days=span, months=months, start=start, end=now, running_jobs=running,
                  steady=work["steady"], exploratory=work["exploratory"], by_target=by_target,
                  steady_ref_hours_per_month=ref_per_month,
                  measured_steady_ref_hours_per_month=measured, paid_per_ref_hour_usd=paid,
                  paid_basis=paid_basis, owned=owned, electricity_price=elec,
                  utilization_cap=cap, candidates=candidates, what_if=what_if.overridden(),
                  assumptions=assumptions, missing=missing, owned_use=use,
                  measured_use=busy)
