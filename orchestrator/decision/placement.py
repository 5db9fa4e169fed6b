"""Where a job runs: price every fitting offer per job, apply the by-kind rule, say why.

The decision uses what it changes: the team's cash and the time people wait. A rented
GPU costs its rent; an owned one, whose purchase is already paid, costs its power plus
a congestion charge for the steady work it would push out. The full cost of owned
hardware (amortized purchase + power) is priced too and shown beside it, never hidden.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Union

from orchestrator.base.targets import CLOUD, LOCAL, ONPREM
from orchestrator.decision import explain as ex
from orchestrator.decision.cluster_offers import unread_offers
from orchestrator.decision.demand import demand_on
from orchestrator.decision.gpus import canonical_gpu
from orchestrator.decision.matching import Needs, OfferIndex, candidates, misfit
from orchestrator.decision.models import (
    Alternative,
    Capacity,
    Classification,
    Decision,
    Offer,
    PastRun,
    Reservation,
    share_price,
)
from orchestrator.decision.pricing import HoursEstimator, fmt_money, job_cost

__all__ = ["Needs", "OfferIndex", "decide"]


@dataclass(slots=True)
class _Row:
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
    blockers: list  # (code, text)
    conflicts: tuple = ()  # reservations due before it ends that it leaves too little room
    displaced: tuple = ()  # of those, the ones it would make late past their slack
    congestion: float = 0  # what renting for those would cost (as sum() adds up none: 0)
    score: Optional[float] = None
    pref: int = 99  # its place in the job's stated preference (an ordered list); 99: none


def _wait(o: Offer, used: float, capacity: Optional[Capacity], spec) -> float:
    if o.target != ONPREM or capacity is None:
        return 0.0
    if capacity.load is not None:
        # What the job would hold on this offer: what its record, its Ray metadata and
        # `orch serve`'s queue will say it holds, should it be chosen.
        need = demand_on(spec, o.gpu, used)
        capacity = dataclasses.replace(capacity.load.start(need, capacity.source),
                                       reservations=capacity.reservations)
    if capacity.can_start_now is not None:
        if capacity.can_start_now:
            return 0.0
        return capacity.wait_minutes if capacity.wait_minutes is not None else math.inf
    if capacity.onprem_free is None:
        return 0.0
    free = sum(n for g, n in capacity.onprem_free.items() if canonical_gpu(g) == o.gpu)
    if free >= used:
        return 0.0
    return capacity.wait_minutes if capacity.wait_minutes is not None else math.inf


def _free_gpus(o: Offer, capacity: Capacity) -> float:
    if capacity.onprem_free is not None:
        return sum(n for g, n in capacity.onprem_free.items() if canonical_gpu(g) == o.gpu)
    if capacity.load is not None:
        return capacity.load.free_gpus
    return o.count


def _conflicts(r: _Row, capacity: Optional[Capacity]) -> tuple[Reservation, ...]:
    """The reservations (cron schedules due, queued steady work) on this pool that would
    find too few GPUs free because this job holds some until it ends."""
    if (r.offer.target != ONPREM or r.offer.gpu is None or capacity is None
            or not capacity.reservations or r.hours is None):
        return ()
    end_h = r.wait / 60.0 + r.hours
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


def _rank(r: _Row) -> tuple:
    """Cheapest first; on owned GPUs, at the same cost (to a micro-dollar: 4 GPUs for 8 h
    and 8 for 4 h may differ in the last bit), the fewest GPUs held: GPUs a job holds beyond
    what it needs only make the next job rent or wait; then the shorter run, then the
    offer's own fields. Cloud rows are compared unrounded: round() on each of a plan's
    rows was a tenth of bench_plan's time."""
    score = math.inf if r.score is None else round(r.score, 6) if r.owned else r.score
    return (score, r.tie[0], r.used * r.nodes if r.owned else 0.0,
            math.inf if r.hours is None else r.hours, r.pref, r.tie)


class _Rules:
    """The settings and the job's limits, read once per decision."""

    def __init__(self, spec, settings, spent: float):
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
        self.spent = spent  # USD this month so far; the limits as blockers show them:
        self.limits = {k: self.money(v) for k, v in (("hourly", self.max_hourly),
                       ("cost", self.max_cost), ("spent", spent), ("month", self.monthly))}

    def money(self, usd: Optional[float]) -> str:
        return fmt_money(usd, self.cur, self.rate)

    def budget_cost(self, r: _Row) -> Optional[float]:
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


def _price(offers: Sequence[Offer], used: float, est: HoursEstimator, needs: Needs,
           capacity: Optional[Capacity], spec, rules: _Rules, index: OfferIndex) -> list[_Row]:
    """Price offers of one kind (one model and count, target and spot-ness: what they share
    is worked out once) and list what blocks each, except the kind's own rule about waiting."""
    o = offers[0]
    nodes = needs.nodes_on(o)
    hours, basis = est.hours(o.gpu, used * nodes)  # the work splits over every node's GPUs
    if hours is not None and o.spot and rules.checkpoints:
        hours, basis = rules.on_spot(hours, basis)
    shared = []
    if rules.local_only and o.target != LOCAL:
        shared.append(("mode", "local-only mode keeps jobs on this machine"))
    if o.target not in rules.allow:
        shared.append(("allow", f"placement.allow excludes {o.target}"))
    if needs.use_spot and not o.owned and not o.spot:
        shared.append(("use_spot", "resources.use_spot asks for spot"))
    elif o.spot and not needs.use_spot:
        if not rules.checkpoints:
            shared.append(("spot", "spot needs checkpoint.storage: a preemption would lose the work"))
    if hours is None:
        shared.append(("speed", basis))
    if o.target == ONPREM and capacity is not None and capacity.unreachable:
        shared.append(("unreachable", capacity.unreachable))
    budgets = (rules.max_hourly, rules.max_cost, rules.monthly) != (None, None, None)
    ties, tie_break, owned, rows = index.ties, index.tie_break, o.owned, []
    for o in offers:
        full = power = None
        if hours is not None:
            full, power = job_cost(o, hours, used, rules.startup, nodes)
        wait = 0.0 if capacity is None else _wait(o, used, capacity, spec)
        bad = misfit(o, needs) if needs.narrow else None
        rows.append(r := _Row(o, owned, used, nodes, hours, basis, full, power,
                              power if owned else full, wait, ties.get(id(o)) or tie_break(o),
                              [("fit", bad)] if bad else shared[:]))
        if bad:
            continue
        if o.credentials is False:
            r.blockers.append(("credentials", f"no credentials here: `sky check {o.cloud}`"))
        if not budgets:
            continue
        b, money = r.blockers, rules.money
        if rules.max_hourly is not None and (per_h := share_price(o, used) * nodes) > rules.max_hourly:
            b.append(("hourly", f"{money(per_h)}/h > budget.max_hourly {rules.limits['hourly']}"))
        spend, what = rules.budget_cost(r), "cash" if rules.cash_budget else "in full"
        if rules.max_cost is not None and spend is not None and spend > rules.max_cost:
            b.append(("cost", f"{money(spend)} {what} > budget.max_cost {rules.limits['cost']}"))
        if rules.monthly is not None and spend is not None and rules.spent + spend > rules.monthly:
            b.append(("month", f"{rules.limits['spent']} spent this month + {money(spend)} {what} "
                               f"> monthly_budget {rules.limits['month']}"))
    return rows


def _rows(variants: list[Needs], resources, index: OfferIndex, est: HoursEstimator,
          capacity: Optional[Capacity], spec, rules: _Rules) -> list[_Row]:
    """Each fitting offer priced once: for an offer more than one candidate of the job's
    resources allows, as the candidate it fits with the fewest blockers (the earlier on a
    tie). A stated preference (an `ordered` list of candidates, or a list of accelerators)
    breaks ties in cost, never outranks it."""
    by_offer: dict[tuple, _Row] = {}
    ordered, gpus_ordered = resources.ordered is not None, resources.accelerators_ordered
    for at, needs in enumerate(variants):
        gpu_pref = {g: i for i, (g, _) in enumerate(needs.choices)}
        rows = []
        for used, offers in candidates(needs, index):
            rows += _price(offers, used, est, needs, capacity, spec, rules, index)
        if ordered or gpus_ordered:
            for r in rows:
                r.pref = at if ordered else gpu_pref.get(r.offer.gpu or "", 99)
        if len(variants) == 1 and not index.repeats:  # candidates lists each offer once
            return rows
        for r in rows:
            key = (id(r.offer), r.used)
            if key not in by_offer or len(r.blockers) < len(by_offer[key].blockers):
                by_offer[key] = r
    return list(by_offer.values())


def _apply_kind(rows: list[_Row], kind: str, rules: _Rules) -> str:
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
            if r.owned and r.offer.target == ONPREM:
                limit, by = rules.wait_limit(r.hours)
                if rules.deadline_h is not None and r.hours is not None and r.hours > rules.deadline_h:
                    r.blockers.append(("wait", f"{r.hours:.3g} h on {r.used:g} GPUs ends after "
                                               f"its deadline ({rules.deadline_h:g} h)"))
                elif r.wait > limit:
                    r.blockers.append(("wait", f"on-prem busy: wait {ex.minutes(r.wait)} > the "
                                               f"{limit:.0f} min {by} allows"))
        return "steady"
    if not cloud_ok:  # nowhere to rent: owned GPUs within max_wait_minutes are the only way
        for r in rows:
            if r.owned and r.wait > s.max_wait_minutes:
                r.blockers.append(("wait", f"on-prem busy: wait {ex.minutes(r.wait)} > max "
                                           f"{s.max_wait_minutes:g} min"))
        mode = "fallback"
    else:
        for r in rows:
            if not r.owned or r.blockers:
                continue
            if not s.exploratory_backfill:
                r.blockers.append(("backfill", "exploratory_backfill is off: exploratory work "
                                               "rents"))
            elif r.wait > rules.explore_wait:
                r.blockers.append(("wait", f"on-prem busy: wait {ex.minutes(r.wait)} > the "
                                           f"{rules.explore_wait:g} min exploratory work waits "
                                           "for owned GPUs (exploratory_wait_minutes)"))
            elif r.conflicts:
                x = r.conflicts[0]
                r.blockers.append(("due", f"{x.what or 'steady work'} is due on these GPUs in "
                                          f"{x.in_hours:.2g} h, before this job would end "
                                          f"({r.hours:.3g} h)"))
        mode = "exploratory"
    if rules.value:
        for r in rows:
            if r.score is not None and r.hours is not None:
                r.score += rules.value * _turnaround_h(r, r.hours, rules)
    return mode


def _turnaround_h(r: _Row, hours: float, rules: _Rules) -> float:
    return r.wait / 60.0 + hours + (0.0 if r.owned else rules.startup / 60.0)


def _alternative(r: _Row, cash_budget: bool) -> Alternative:
    """The row as shown. Positional, in field order: keywords take twice as long."""
    cash, b = r.cash, r.blockers
    return Alternative(r.offer, r.hours, r.full, None if cash is None else cash + r.congestion,
                       r.basis, r.used,
                       None if not b else b[0][1] if len(b) == 1 else "; ".join([t for _, t in b]),
                       r.wait, r.power if r.owned else None, r.congestion,
                       ", ".join([x.what or "steady work" for x in r.displaced]) if r.displaced
                       else "", r.score, cash, cash if cash_budget else r.full, r.nodes)


def decide(spec, classification: Classification, offers: Union[Sequence[Offer], OfferIndex],
           capacity: Optional[Capacity], settings, *, fingerprint: str = "",
           history: Iterable[PastRun] = (), estimator: Optional[HoursEstimator] = None,
           spent_this_month: float = 0.0, notes: Sequence[str] = ()) -> Decision:
    """Decide where one job runs. Pure: everything arrives as arguments.

    Every fitting offer is priced per job in full (for the record) and at its marginal
    cost, which decides: rent for the cloud; power plus congestion for owned hardware.
    The by-kind rule:
    - steady work runs on owned GPUs: it waits for them while its deadline
      (`schedule.deadline_hours`, else `max_wait_minutes`) allows, and bursts to the
      cheapest rentable GPU per job only when waiting would break that; with no cloud
      allowed it queues for them;
    - exploratory work does not queue for owned GPUs: it rents the cheapest GPU per job,
      unless owned GPUs are idle now, or expected to free within `exploratory_wait_minutes`
      (half the cloud's start-up by default: renting takes the start-up anyway), and stay
      free for its whole estimated run (nothing queued, no cron schedule due on them
      before it ends), where it backfills at marginal cost (`exploratory_backfill`); `turnaround_value_per_hour` adds the value
      of the hours until it is done. With nothing rentable, owned GPUs within
      `max_wait_minutes` are the way.
    Spot only when the job checkpoints, priced with its expected preemptions. Local-only
    mode keeps everything on this machine. Budgets (the job's, and the month's given `spent_this_month` USD so
    far, both counted as `budget_basis` says) and `placement.allow` are hard limits."""
    index = offers if isinstance(offers, OfferIndex) else OfferIndex(offers)
    est = estimator or HoursEstimator(spec, fingerprint, history, settings.default_job_hours,
                                      settings.gpu_speeds)
    variants = Needs.variants(spec)  # one per any_of / ordered candidate; else just one
    needs = variants[0]
    rules = _Rules(spec, settings, spent_this_month)
    money = rules.money
    rows = _rows(variants, spec.resources, index, est, capacity, spec, rules)
    if capacity is not None and capacity.reservations:  # else nothing is due: no conflicts
        rent = min((r.full for r in rows if not r.owned and r.full is not None
                    and not any(c in ("fit", "speed") for c, _ in r.blockers)), default=None)
        for r in rows:
            r.conflicts = _conflicts(r, capacity)
            end_h = r.wait / 60.0 + (r.hours or 0.0)
            r.displaced = tuple(x for x in r.conflicts if end_h > x.in_hours + x.slack_hours + 1e-9)
            r.congestion = sum(x.cloud_cost if x.cloud_cost is not None else (rent or 0.0)
                               for x in r.displaced)
    mode = _apply_kind(rows, classification.kind, rules)
    rows.sort(key=_rank)
    rows += [_Row(o, o.owned, o.count, 1, None, "", None, None, None, 0.0, (), [("unreachable", o.unread)])
             for o in unread_offers(needs, capacity, index.has_onprem, rules.allow, rules.local_only)]
    cash_budget = rules.cash_budget
    alts = [_alternative(r, cash_budget) for r in rows]
    ranked = tuple(alts)
    eligible = [a for a in ranked if a.excluded is None]
    common = dict(kind=classification.kind, classification=classification, alternatives=ranked,
                  currency=rules.cur, currency_rate=rules.rate, decided_by="marginal",
                  notes=tuple(dict.fromkeys(tuple(notes) + ex.notes(
                      index, len(alts), capacity, rules.local_only, alts))))

    queueable = [a for a, r in zip(alts, rows) if a.offer.target == ONPREM and r.blockers
                 and all(code == "wait" for code, _ in r.blockers)] if not eligible else []
    if not eligible and queueable and classification.kind == "steady" and not rules.local_only:
        # Nothing can start in time and no cloud may take it: wait for the owned GPUs.
        best = queueable[0]
        choice = dataclasses.replace(best, excluded=None)
        w = "an unknown time" if math.isinf(best.wait_minutes) else f"about {best.wait_minutes:.0f} min"
        reasons = (f"queued on-prem: the cluster is busy for {w} (longer than steady work "
                   f"would wait), and no cloud offer is allowed ({ex.why_not(ranked, CLOUD)}), "
                   "so the job waits for the owned GPUs",
                   ex.estimate_line(choice, money), ex.full_words(choice, money))
        return Decision(target=ONPREM, choice=choice, reasons=reasons, **common)

    if not eligible:
        refusal = ex.refusal(needs, index, alts, [r.blockers for r in rows], settings, money,
                             rules.local_only, classification.kind)
        return Decision(target=None, choice=None, reasons=(refusal,), refusal=refusal, **common)

    choice = eligible[0]
    lines = ex.rule_lines(choice, ranked, eligible, mode, money, settings, rules.allow, rules.value)
    lines.append(ex.estimate_line(choice, money))
    if choice.offer.owned:
        lines.append(ex.full_words(choice, money))
    if choice.offer.spot:
        lines.append(f"spot: the job checkpoints to {rules.storage}; with its expected "
                     "preemptions spot still costs less than on-demand")
    elif not choice.offer.owned and choice.est_cost is not None:
        # Both priced: an eligible offer has its hours, and so has one blocked only as spot.
        cost = choice.est_cost
        spot = next((a for a, r in zip(alts, rows) if r.blockers and a.offer.spot
                     and all(c == "spot" for c, _ in r.blockers)
                     and a.est_cost is not None and a.est_cost < cost), None)
        if spot is not None:
            lines.append(f"on-demand: spot would cost {money(spot.est_cost)}, but {spot.excluded}")
    return Decision(target=choice.offer.target, choice=choice, reasons=tuple(lines), **common)

