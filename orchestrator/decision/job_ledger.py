"""What each job really cost, and what the best option it passed over would have cost.

Pure: a job record (as the store returns it) in, one ledger entry out. A cloud job costs
what its launches were billed, every recovery and start-up included (the launch ledger of
`orchestrator.decision.cloud_bill`); owned hardware (local, on-prem) costs its amortized
purchase plus power, for the share of its GPUs the job held and the hours it held them.
Nothing owned is ever free. Beside that full cost, each entry says what the team paid out
(`cash_usd`): the rental for a cloud job, only the power for owned hardware, whose purchase
is already paid. Budgets count one or the other (settings.budget_basis).
"""

from __future__ import annotations

import csv
import io
import math
import time
from typing import Iterable, Optional

from orchestrator.base.targets import rented
from orchestrator.decision.reconcile import TERMINAL
from orchestrator.records import JobRow
from orchestrator.records.cost import CostAlternative, CostEntry, CostGroup
from orchestrator.records.metrics import RunMetrics
from orchestrator.records.placement import PlacedOffer, Placement

GROUPS = ("name", "target", "kind", "month", "day")
CSV_FIELDS = ("id", "name", "status", "kind", "target", "where", "gpu", "gpu_count", "started",
              "finished", "hours", "gpu_hours", "cost_usd", "cash_usd", "amortized_usd", "power_usd",
              "estimate_usd", "recoveries", "alternative", "alternative_usd", "saved_usd",
              "power_basis", "power_rated_usd")
BASES = ("cash", "full")  # what a budget counts: settings.budget_basis
# The month's spend in parts (month_parts): cash is cloud + owned_power, full all three.
SPEND_PARTS = ("cloud", "owned_power", "owned_amortized")


def run_window(rec: JobRow, now: float) -> tuple[Optional[float], Optional[float]]:
    """(start, end) of the time the job held its hardware: the backend's own times when it
    reported them, else orch's; end is None while it runs, start None if it never ran."""
    start = rec.info.backend_start or rec.started_at
    end = rec.info.backend_end or rec.finished_at
    if start is None and rec.status in ("SUCCEEDED", "FAILED", "CANCELLED"):
        wall = rec.metrics.wall_s  # the runner's own clock
        if wall and end:
            start = end - wall
    if start is not None and end is not None and end < start:
        end = start
    return start, end


def best_alternative(decision: Placement) -> Optional[PlacedOffer]:
    """The cheapest option the plan did not choose: an eligible one when there was one,
    else the cheapest excluded one (with why it was excluded)."""
    choice = decision.choice or PlacedOffer()
    others = [a for a in decision.alternatives
              if a.est_cost is not None and not a.same_offer(choice)]
    eligible = [a for a in others if a.excluded is None]
    pool = eligible or others
    return min(pool, key=lambda a: a.est_cost or 0.0) if pool else None


def measured_wh(metrics: RunMetrics) -> Optional[float]:
    """The energy a job's GPUs drew over its run, as NVML measured it (the runner's
    telemetry, jobs/telemetry.py); None where nothing was measured (a CPU job, a GPU
    without NVML, a run that has not ended) or the figure is no finite amount."""
    summary = metrics.summary()
    if summary is None:
        return None
    energy = summary.energy_wh
    if summary.source != "nvml" or energy is None or not math.isfinite(energy) or energy < 0:
        return None
    return float(energy)


def measured_power_usd(rec: JobRow, kwh_price_usd: Optional[float],
                       rated_usd: float) -> Optional[float]:
    """A job's power as its workers measured it, in USD, where that may stand for it: only a
    `train:` job's (orch's runner measures; a `run:` job's own lines are all its code's), and
    never past its rated figure (the hardware's rated watts x GPUs x hours). The figures come
    from the job's workers, where its code runs and can print any line, so no more than its
    hardware can draw is ever taken from them. None: the rated figure stands."""
    if not rec.stored.train or not kwh_price_usd:
        return None
    energy = measured_wh(rec.metrics)
    if energy is None:
        return None
    return min(energy / 1000.0 * kwh_price_usd, rated_usd)


def current(rec: JobRow, now: Optional[float] = None) -> CostEntry:
    """A job's ledger line: the one kept at its end, else what it has cost so far."""
    saved = rec.info.cost
    return saved if saved and rec.status in TERMINAL else entry(rec, now)


def entry(rec: JobRow, now: Optional[float] = None) -> CostEntry:
    """The ledger entry of one job; for a running job, what it has cost so far.

    `cost_usd` is the full cost; `cash_usd` what was paid out for it: a cloud job's bill,
    an owned job's power: the energy its GPUs drew where the runner of a `train:` job
    measured it (NVML: `power_basis` "measured", never past the rated figure beside it in
    `power_rated_usd`: `measured_power_usd`), else its
    hardware's rated watts x hours ("rated"). A job planned before orch split an owned price into amortized
    purchase and power has no power figure, so its cash is its full cost: an overstatement
    (the budget is reached sooner), never a job shown as cheaper than it was."""
    now = time.time() if now is None else now
    decision = rec.decision or Placement()
    choice = rec.choice
    chose = choice or PlacedOffer()  # no choice: none of its figures
    rate = decision.estimate.rate
    start, end = run_window(rec, now)
    hours = 0.0 if start is None else max(0.0, ((end or now) - start) / 3600.0)
    target = rec.target or chose.target
    count = chose.count or 0
    amortized = power = rated = None
    basis: Optional[str] = None
    recoveries = 0
    if rented(target):
        bill = rec.info.ledger  # the cloud bill (decision.cloud_bill)
        cost = bill.cost_usd if bill else 0.0
        recoveries = bill.recoveries if bill else 0
        if bill and "billed_hours" in bill.model_fields_set:
            hours = bill.billed_hours
    else:
        price = chose.price_per_hour_usd
        if price is None:  # planned by an older orch: the price shown, in its currency
            price = (chose.price_per_hour or 0.0) / rate
        cost = price * hours
        if chose.amortized_per_hour_usd is not None:
            amortized = chose.amortized_per_hour_usd * hours
            power = (chose.power_per_hour_usd or 0.0) * hours
            basis = "rated"
            measured = measured_power_usd(rec, chose.kwh_price_usd, power)
            if measured is not None:
                rated, power, basis = power, measured, "measured"
                cost += power - rated
    cash = cost if rented(target) or power is None else power
    out = CostEntry(
        id=rec.id, name=rec.name, status=rec.status, kind=rec.kind, target=target,
        where=choice.where() if choice else target, gpu=chose.gpu,
        gpu_count=count, started_at=start, finished_at=end,
        created_at=rec.created_at, running=end is None and start is not None,
        hours=round(hours, 6), gpu_hours=round(hours * (count or 0), 6),
        cost_usd=round(cost, 6), cash_usd=round(cash, 6),
        amortized_usd=None if amortized is None else round(amortized, 6),
        power_usd=None if power is None else round(power, 6),
        power_basis=basis, power_rated_usd=None if rated is None else round(rated, 6),
        estimate_usd=decision.estimate.cost_usd, recoveries=recoveries, alternative=None)
    alt = best_alternative(decision)
    if alt is not None and alt.est_cost is not None:
        # Its estimate, scaled by how long the job really took against the chosen option's
        # estimate: the same work, priced where it did not run.
        alt_usd = alt.est_cost / rate
        chosen_h = chose.est_hours
        if chosen_h and start is not None and not rented(target):
            alt_usd *= hours / chosen_h
        elif chosen_h and rented(target) and hours:
            alt_usd *= hours / (chosen_h + _startup_h(chose))
        out.alternative = CostAlternative(where=alt.where(), device=alt.device(),
                                          cost_usd=round(alt_usd, 6), excluded=alt.excluded)
    return out


def cash(e: CostEntry) -> float:
    """An entry's cash, also for an entry saved before entries had `cash_usd`."""
    if e.cash_usd is not None:
        return e.cash_usd
    if not rented(e.target) and e.power_usd is not None:
        return e.power_usd
    return e.cost_usd


def _check(basis: str) -> None:
    if basis not in BASES:
        raise ValueError(f"budget basis {basis!r}: not one of {', '.join(BASES)}")


def spend(e: CostEntry, basis: str = "cash") -> float:
    """What an entry counts against a budget: its cash, or its full cost. A measured power
    comes from the job's own workers, whose lines are not signed (they run the job's code),
    so it never counts less than the rated figure: the job's output cannot lower its budget."""
    _check(basis)
    under = (e.power_rated_usd or 0.0) - (e.power_usd or 0.0) if e.power_basis == "measured" else 0.0
    return (cash(e) if basis == "cash" else e.cost_usd) + max(0.0, under)


def hourly(choice: PlacedOffer, basis: str = "cash") -> Optional[float]:
    """USD per hour a plan's choice counts against a budget on `basis` (None unpriced): an
    owned choice's power alone for cash, when the plan recorded it; else its full price."""
    _check(basis)
    if basis == "cash" and not rented(choice.target) and choice.power_per_hour_usd is not None:
        return choice.power_per_hour_usd
    return choice.price_per_hour_usd


def _startup_h(choice: PlacedOffer) -> float:
    """Billed start-up hours in a cloud choice's estimate: cost / price - run hours."""
    price = choice.price_per_hour
    if not price or choice.est_cost is None or choice.est_hours is None:
        return 0.0
    return max(0.0, choice.est_cost / price - choice.est_hours)


def period_key(e: CostEntry, by: str) -> str:
    if by in ("month", "day"):
        ts = e.finished_at or e.started_at or e.created_at or 0.0
        return time.strftime("%Y-%m" if by == "month" else "%Y-%m-%d", time.gmtime(ts))
    value = {"name": e.name, "target": e.target, "kind": e.kind}.get(by)
    return str(value or "-")


def group(entries: Iterable[CostEntry], by: str) -> list[CostGroup]:
    """Totals per name, target, kind, month or day, largest spend first (periods in order)."""
    rows: dict[str, CostGroup] = {}
    for e in entries:
        k = period_key(e, by)
        r = rows.setdefault(k, CostGroup(by=by, key=k))
        r.jobs += 1
        r.hours += e.hours
        r.gpu_hours += e.gpu_hours
        r.cost_usd += e.cost_usd
        r.cash_usd += cash(e)
        r.recoveries += e.recoveries
        r.alternative_usd += e.alternative.cost_usd if e.alternative else e.cost_usd
    out = list(rows.values())
    for r in out:
        r.saved_usd = r.alternative_usd - r.cost_usd
        for k in ("hours", "gpu_hours", "cost_usd", "cash_usd", "alternative_usd", "saved_usd"):
            setattr(r, k, round(getattr(r, k), 6))
    if by in ("month", "day"):
        return sorted(out, key=lambda r: r.key)
    return sorted(out, key=lambda r: (-r.cost_usd, r.key))


def month_start(now: float) -> float:
    """Epoch seconds of the first instant of `now`'s calendar month, UTC."""
    import calendar

    t = time.gmtime(now)
    return float(calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0)))


def month_spend(entries: Iterable[CostEntry], now: float, basis: str = "cash") -> float:
    """USD spent in `now`'s calendar month (UTC), in cash or full cost (`basis`, as
    settings.budget_basis): jobs that ended in it, and running jobs."""
    _check(basis)
    since = month_start(now)
    return sum(spend(e, basis) for e in entries if _in_month(e, since))


def month_parts(entries: Iterable[CostEntry], now: float) -> dict[str, float]:
    """The month's spend (the jobs month_spend counts) in SPEND_PARTS: the cloud's bills,
    owned hardware's power as a budget counts it (never below its rated figure), and owned
    hardware's amortized purchase. A cash budget counts cloud + owned_power, a full one all
    three. An owned job planned before orch split its price counts whole as power, as its
    cash does (see `entry`)."""
    since = month_start(now)
    out = dict.fromkeys(SPEND_PARTS, 0.0)
    for e in entries:
        if not _in_month(e, since):
            continue
        paid = spend(e, "cash")
        if rented(e.target):
            out["cloud"] += paid
        else:
            out["owned_power"] += paid
            out["owned_amortized"] += max(0.0, spend(e, "full") - paid)
    return {part: round(usd, 6) for part, usd in out.items()}


def _in_month(e: CostEntry, since: float) -> bool:
    """Whether an entry counts in the month from `since`: it runs, or it ended in it."""
    return e.running or (e.finished_at or 0.0) >= since


def daily_by_target(entries: Iterable[CostEntry]) -> list[dict]:
    """Rows for the spend plot: {day, target, cost} summed per day and target."""
    acc: dict[tuple, float] = {}
    for e in entries:
        k = (period_key(e, "day"), e.target or "-")
        acc[k] = acc.get(k, 0.0) + e.cost_usd
    return [{"day": d, "target": t, "cost": c} for (d, t), c in sorted(acc.items())]


def to_csv(entries: Iterable[CostEntry], rate: float = 1.0) -> str:
    """One line per job; money in USD (the columns say so)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for e in entries:
        alt = e.alternative
        row = e.model_dump(include=set(CSV_FIELDS))
        w.writerow({
            **{k: row[k] for k in CSV_FIELDS if k in row},
            "cash_usd": cash(e),
            "started": _iso(e.started_at), "finished": _iso(e.finished_at),
            "alternative": f"{alt.where} {alt.device}" if alt else "",
            "alternative_usd": alt.cost_usd if alt else "",
            "saved_usd": round(alt.cost_usd - e.cost_usd, 6) if alt else "",
        })
    return buf.getvalue()


def _iso(ts: Optional[float]) -> str:
    return "" if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
