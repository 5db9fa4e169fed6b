"""Placement's rules: what blocks an option (as a `Block` code), the by-kind rule, the cron guard.

`placement.decide` prices every fitting offer into a `Row`; the rules here say which rows
a job may not take and score the rest. The cron guard: work on owned GPUs that would hold
them past the moment a cron run (or queued steady work) must start to meet its deadline
pushes that run out. Whether it does is judged by the job's estimate with its
uncertainty (`HoursEstimator.spread`), the run's deadline (its slack) and its fallback:
a run pushed out rents, so the job is charged that rent (its congestion) and takes the
owned GPUs only where it still costs the team less; only a run that has nowhere to rent
blocks them outright. A cron run due before the job ends but with the slack to wait for
it is not pushed out, and costs nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Optional

from orchestrator.base.targets import LOCAL
from orchestrator.decision import explain as ex
from orchestrator.decision.gpus import canonical_gpu
from orchestrator.decision.models import Capacity, Offer, Reservation
from orchestrator.decision.pricing import fmt_money


class Block(StrEnum):
    """Why an option is ruled out: the code a refusal's advice and `explain` key on."""

    FIT = "fit"  # the offer does not fit the job's resources
    SPEED = "speed"  # no speed figure for its GPU: no hours, no price
    UNREACHABLE = "unreachable"  # the cluster could not be read
    MODE = "mode"  # local-only mode
    ALLOW = "allow"  # placement.allow
    USE_SPOT = "use_spot"  # resources.use_spot asks for spot
    SPOT = "spot"  # spot without checkpoints
    CREDENTIALS = "credentials"
    HOURLY = "hourly"  # budget.max_hourly
    COST = "cost"  # budget.max_cost
    MONTH = "month"  # monthly_budget
    WAIT = "wait"  # owned GPUs not free soon enough for the job's kind
    BACKFILL = "backfill"  # exploratory_backfill is off
    DUE = "due"  # it would make a cron run (or queued steady work) late that cannot rent

    __hash__ = str.__hash__  # a code is its text: `explain`'s tables are keyed by it


@dataclass(slots=True)
class Row:
    """One offer being priced: its figures and what blocks it, before it becomes an Alternative."""

    offer: Offer
    owned: bool
    used: float  # GPUs per machine
    nodes: int  # machines: num_nodes VMs of a cloud offer, else 1
    hours: Optional[float]
    basis: str
    full: Optional[float]
    power: Optional[float]
    cash: Optional[float]  # what the team pays: the power of owned GPUs, else the rent (full)
    wait: float
    tie: tuple  # the offer's own fields, for ties in cost (OfferIndex.tie_break)
    blockers: list  # (Block, text)
    conflicts: tuple = ()  # reservations due before it may end that it leaves too little room
    displaced: tuple = ()  # of those, the ones it would make late past their slack
    congestion: float = 0  # what renting for those would cost (as sum() adds up none: 0)
    score: Optional[float] = None
    pref: int = 99  # its place in the job's stated preference (an ordered list); 99: none
    stranded: tuple = ()  # displaced reservations with no cloud to fall back on


def _free_gpus(o: Offer, capacity: Capacity) -> float:
    if capacity.onprem_free is not None:
        return sum(n for g, n in capacity.onprem_free.items() if canonical_gpu(g) == o.gpu)
    if capacity.load is not None:
        return capacity.load.free_gpus
    return o.count


def _conflicts(r: Row, capacity: Capacity, end_h: float) -> tuple[Reservation, ...]:
    """The reservations (cron schedules due, queued steady work) on this pool that would
    find too few GPUs free because this job holds some until `end_h`."""
    due = sorted((x for x in capacity.reservations if x.in_hours < end_h
                  and (x.gpu is None or canonical_gpu(x.gpu) == r.offer.gpu)),
                 key=lambda x: x.in_hours)
    left = _free_gpus(r.offer, capacity) - r.used
    out = []
    for x in due:
        if left >= x.gpus - 1e-9:
            left -= x.gpus
        else:
            out.append(x)
    return tuple(out)


def guard_crons(rows: list[Row], capacity: Optional[Capacity], spread: float) -> None:
    """Set each owned row's conflicts, the reservations it would push out and what renting
    for those costs. A row may end as late as its wait + its hours x `spread` (the
    estimate's uncertainty: a run that ends later than estimated pushes out as surely);
    a reservation is pushed out when that end is past its start + its slack. Its fallback
    is its own cloud price (infinite: it may not rent), else renting this job's cheapest
    cloud option; with neither, it is stranded (`apply_kind` blocks the row for
    exploratory work)."""
    if capacity is None or not capacity.reservations:  # nothing is due: no conflicts
        return
    rent = min((r.full for r in rows if not r.owned and r.full is not None
                and not any(c in (Block.FIT, Block.SPEED) for c, _ in r.blockers)), default=None)
    for r in rows:
        if not r.offer.pooled or r.offer.gpu is None or r.hours is None:
            continue
        end_h = r.wait / 60.0 + r.hours * spread
        r.conflicts = _conflicts(r, capacity, end_h)
        r.displaced = tuple(x for x in r.conflicts if end_h > x.in_hours + x.slack_hours + 1e-9)
        r.stranded = tuple(x for x in r.displaced if math.isinf(x.cloud_cost or 0.0)
                           or (x.cloud_cost is None and rent is None))
        r.congestion = sum(x.cloud_cost if x.cloud_cost is not None else (rent or 0.0)
                           for x in r.displaced if x not in r.stranded)


def rank(r: Row) -> tuple:
    """Cheapest first; on owned GPUs, at the same cost (to a micro-dollar: 4 GPUs for 8 h
    and 8 for 4 h may differ in the last bit), the fewest GPUs held: GPUs a job holds beyond
    what it needs only make the next job rent or wait; then the shorter run, then the
    offer's own fields. Cloud rows are compared unrounded: round() on each of a plan's
    rows was a tenth of bench_plan's time."""
    score = math.inf if r.score is None else round(r.score, 6) if r.owned else r.score
    return (score, r.tie[0], r.used * r.nodes if r.owned else 0.0,
            math.inf if r.hours is None else r.hours, r.pref, r.tie)


class Rules:
    """The settings and the job's limits, read once per decision."""

    def __init__(self, spec, settings, spent: float, spread: float = 1.0):
        rate = settings.currency_rate
        self.settings, self.rate, self.cur = settings, rate, settings.currency
        self.local_only = settings.effective_mode == "local"
        self.allow = set(spec.placement.allow)
        self.checkpoints = spec.checkpoint.storage is not None
        self.storage = spec.checkpoint.storage
        self.startup = settings.cloud_startup_minutes
        self.max_cost = spec.budget.max_cost / rate if spec.budget.max_cost else None
        self.max_hourly = spec.budget.max_hourly / rate if spec.budget.max_hourly else None
        self.monthly = settings.monthly_budget / rate if settings.monthly_budget else None
        self.cash_budget = settings.budget_basis == "cash"
        self.deadline_h = spec.schedule.deadline_hours
        self.value = settings.turnaround_value_per_hour / rate  # USD per hour sooner
        self.explore_wait = settings.exploratory_wait
        self.spread = spread  # how many times its estimate the job may take
        self.spent = spent  # USD this month so far; the limits as blockers show them:
        self.limits = {k: self.money(v) for k, v in (("hourly", self.max_hourly),
                       ("cost", self.max_cost), ("spent", spent), ("month", self.monthly))}

    def money(self, usd: Optional[float]) -> str:
        return fmt_money(usd, self.cur, self.rate)

    def budget_cost(self, r: Row) -> Optional[float]:
        return r.cash if self.cash_budget else r.full

    def on_spot(self, hours: float, basis: str) -> tuple[float, str]:
        """A checkpointing run's expected hours on spot, whatever its length: each expected
        preemption (spot_preemptions_per_hour x its hours) redoes spot_rework_minutes of
        work and waits a start-up again. Priced so, spot wins only where it costs less than
        on-demand in expectation, and a long run is not kept off it."""
        rate = self.settings.spot_preemptions_per_hour
        lost_h = (self.settings.spot_rework_minutes + self.startup) / 60.0
        expected = rate * hours
        if expected <= 0:
            return hours, basis
        return hours * (1 + rate * lost_h), (f"{basis}; on spot {expected:.2g} expected "
                                             f"preemptions, each {lost_h * 60:.0f} min more")

    def wait_limit(self, hours: Optional[float]) -> tuple[float, str]:
        """Minutes steady work may wait for owned GPUs, and what sets that."""
        if self.deadline_h is not None and hours is not None:
            slack = max(0.0, (self.deadline_h - hours) * 60.0)
            return slack, f"its deadline ({self.deadline_h:g} h, {slack:.0f} min of slack)"
        m = self.settings.max_wait_minutes
        return m, f"max_wait_minutes ({m:g})"


def apply_kind(rows: list[Row], kind: str, rules: Rules) -> str:
    """Block what the by-kind rule rules out and set each row's score; returns the rule
    that applies, in words the reasons use."""
    s = rules.settings
    cloud_ok = any(not r.blockers for r in rows if not r.owned)  # before the kind's rule
    for r in rows:
        r.score = None if r.cash is None else r.cash + r.congestion  # its dispatch
    if rules.local_only:
        return LOCAL
    if kind == "steady":
        for r in rows:
            if r.owned and r.offer.pooled:
                limit, by = rules.wait_limit(r.hours)
                if rules.deadline_h is not None and r.hours is not None and r.hours > rules.deadline_h:
                    r.blockers.append((Block.WAIT, f"{r.hours:.3g} h on {r.used:g} GPUs ends after "
                                                   f"its deadline ({rules.deadline_h:g} h)"))
                elif r.wait > limit:
                    r.blockers.append((Block.WAIT, f"on-prem busy: wait {ex.minutes(r.wait)} > "
                                                   f"the {limit:.0f} min {by} allows"))
        return "steady"
    if not cloud_ok:  # nowhere to rent: owned GPUs within max_wait_minutes are the only way
        for r in rows:
            if r.owned and r.wait > s.max_wait_minutes:
                r.blockers.append((Block.WAIT, f"on-prem busy: wait {ex.minutes(r.wait)} > max "
                                               f"{s.max_wait_minutes:g} min"))
        mode = "fallback"
    else:
        for r in rows:
            if not r.owned or r.blockers:
                continue
            if not s.exploratory_backfill:
                r.blockers.append((Block.BACKFILL, "exploratory_backfill is off: exploratory "
                                                   "work rents"))
            elif r.wait > rules.explore_wait:
                r.blockers.append((Block.WAIT, f"on-prem busy: wait {ex.minutes(r.wait)} > the "
                                               f"{rules.explore_wait:g} min exploratory work "
                                               "waits for owned GPUs (exploratory_wait_minutes)"))
            elif r.wait > 0 and (late := _late_after_wait(r, rules)):
                r.blockers.append((Block.WAIT, late))
            elif r.stranded:
                x = r.stranded[0]
                r.blockers.append((Block.DUE, f"{x.what or 'steady work'} is due on these GPUs "
                                              f"in {x.in_hours:.2g} h with {x.slack_hours:.2g} h "
                                              f"of slack, before this job may end ({r.hours:.3g} "
                                              "h estimated), and no cloud offer could take it"))
        mode = "exploratory"
    if rules.value:
        for r in rows:
            if r.score is not None and r.hours is not None:
                r.score += rules.value * turnaround_h(r, r.hours, rules)
    return mode


def _late_after_wait(r: Row, rules: Rules) -> str:
    """Why waiting for owned GPUs would break the job's deadline, or "": the expected wait
    plus its run as long as its estimate's uncertainty allows must end by the deadline
    (renting starts it within the start-up, whatever the run's length)."""
    if rules.deadline_h is None or r.hours is None:
        return ""
    end = r.wait / 60.0 + r.hours * rules.spread
    if end <= rules.deadline_h:
        return ""
    return (f"on-prem busy: after a wait of {ex.minutes(r.wait)}, its run (up to "
            f"{r.hours * rules.spread:.3g} h by its estimate's uncertainty) may end past its "
            f"deadline ({rules.deadline_h:g} h)")


def turnaround_h(r: Row, hours: float, rules: Rules) -> float:
    return r.wait / 60.0 + hours + (0.0 if r.owned else rules.startup / 60.0)
