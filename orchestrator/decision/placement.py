"""Where a job runs: price every fitting offer per job, apply the by-kind rule, say why.

The decision uses what it changes: the team's cash and the time people wait. A rented
GPU costs its rent; an owned one, whose purchase is already paid, costs its power plus
a congestion charge for the steady work it would push out. The full cost of owned
hardware (amortized purchase + power) is priced too and shown beside it, never hidden.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Collection, Iterable, Optional, Sequence, Union

from orchestrator.base.targets import CLOUD, LOCAL
from orchestrator.decision import explain as ex
from orchestrator.decision.cluster_offers import unread_offers
from orchestrator.decision.demand import demand_on
from orchestrator.decision.explore import explore
from orchestrator.decision.gpus import canonical_gpu
from orchestrator.decision.matching import Needs, OfferIndex, candidates, misfit
from orchestrator.decision.models import (
    Alternative,
    Capacity,
    Classification,
    Decision,
    Offer,
    PastRun,
    share_price,
)
from orchestrator.decision.placement_rules import Block, Row, Rules, apply_kind, guard_crons, rank
from orchestrator.decision.pricing import HoursEstimator, job_cost

__all__ = ["Needs", "OfferIndex", "decide"]


def _wait(o: Offer, used: float, capacity: Optional[Capacity], spec) -> float:
    if not o.pooled or capacity is None:
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


def _price(offers: Sequence[Offer], used: float, est: HoursEstimator, needs: Needs,
           capacity: Optional[Capacity], spec, rules: Rules, index: OfferIndex) -> list[Row]:
    """Price offers of one kind (one model and count, target and spot-ness: what they share
    is worked out once) and list what blocks each, except the kind's own rule about waiting."""
    o = offers[0]
    nodes = needs.nodes_on(o)
    hours, basis = est.hours(o.gpu, used * nodes)  # the work splits over every node's GPUs
    if hours is not None and o.spot and rules.checkpoints:
        hours, basis = rules.on_spot(hours, basis)
    shared = []
    if rules.local_only and o.target != LOCAL:
        shared.append((Block.MODE, "local-only mode keeps jobs on this machine"))
    if o.target not in rules.allow:
        shared.append((Block.ALLOW, f"placement.allow excludes {o.target}"))
    if needs.use_spot and not o.owned and not o.spot:
        shared.append((Block.USE_SPOT, "resources.use_spot asks for spot"))
    elif o.spot and not needs.use_spot:
        if not rules.checkpoints:
            shared.append((Block.SPOT, "spot needs checkpoint.storage: a preemption would lose the work"))
    if hours is None:
        shared.append((Block.SPEED, basis))
    if o.pooled and capacity is not None and capacity.unreachable:
        shared.append((Block.UNREACHABLE, capacity.unreachable))
    budgets = (rules.max_hourly, rules.max_cost, rules.monthly) != (None, None, None)
    ties, tie_break, owned, rows = index.ties, index.tie_break, o.owned, []
    for o in offers:
        full = power = None
        if hours is not None:
            full, power = job_cost(o, hours, used, rules.startup, nodes)
        wait = 0.0 if capacity is None else _wait(o, used, capacity, spec)
        bad = misfit(o, needs) if needs.narrow else None
        rows.append(r := Row(o, owned, used, nodes, hours, basis, full, power,
                              power if owned else full, wait, ties.get(id(o)) or tie_break(o),
                              [(Block.FIT, bad)] if bad else shared[:]))
        if bad:
            continue
        if o.credentials is False:
            r.blockers.append((Block.CREDENTIALS, f"no credentials here: `sky check {o.cloud}`"))
        if not budgets:
            continue
        b, money = r.blockers, rules.money
        if rules.max_hourly is not None and (per_h := share_price(o, used) * nodes) > rules.max_hourly:
            b.append((Block.HOURLY, f"{money(per_h)}/h > budget.max_hourly {rules.limits['hourly']}"))
        spend, what = rules.budget_cost(r), "cash" if rules.cash_budget else "in full"
        if rules.max_cost is not None and spend is not None and spend > rules.max_cost:
            b.append((Block.COST, f"{money(spend)} {what} > budget.max_cost {rules.limits['cost']}"))
        if rules.monthly is not None and spend is not None and rules.spent + spend > rules.monthly:
            b.append((Block.MONTH, f"{rules.limits['spent']} spent this month + {money(spend)} {what} "
                               f"> monthly_budget {rules.limits['month']}"))
    return rows


def _rows(variants: list[Needs], resources, index: OfferIndex, est: HoursEstimator,
          capacity: Optional[Capacity], spec, rules: Rules) -> list[Row]:
    """Each fitting offer priced once: for an offer more than one candidate of the job's
    resources allows, as the candidate it fits with the fewest blockers (the earlier on a
    tie). A stated preference (an `ordered` list of candidates, or a list of accelerators)
    breaks ties in cost, never outranks it."""
    by_offer: dict[tuple, Row] = {}
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


def _alternative(r: Row, cash_budget: bool) -> Alternative:
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
           spent_this_month: float = 0.0, notes: Sequence[str] = (),
           exploring: Collection[tuple[str, str]] = ()) -> Decision:
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
      (the cloud's start-up by default: renting takes the start-up anyway), where it
      backfills at marginal cost (`exploratory_backfill`): their power, plus the rent of
      any cron run or queued steady work it would make late (judged by its estimate with
      the estimate's uncertainty against that work's slack; placement_rules.guard_crons),
      and never where such work could not rent instead; `turnaround_value_per_hour` adds
      the value of the hours until it is done. With nothing rentable, owned GPUs within
      `max_wait_minutes` are the way.
    Spot only when the job checkpoints, priced with its expected preemptions. Local-only
    mode keeps everything on this machine. Budgets (the job's, and the month's given `spent_this_month` USD so
    far, both counted as `budget_basis` says) and `placement.allow` are hard limits."""
    index = offers if isinstance(offers, OfferIndex) else OfferIndex(offers)
    est = estimator or HoursEstimator(spec, fingerprint, history, settings.default_job_hours,
                                      settings.gpu_speeds)
    variants = Needs.variants(spec)  # one per any_of / ordered candidate; else just one
    needs = variants[0]
    rules = Rules(spec, settings, spent_this_month, est.spread)
    money = rules.money
    rows = _rows(variants, spec.resources, index, est, capacity, spec, rules)
    guard_crons(rows, capacity, est.spread)
    mode = apply_kind(rows, classification.kind, rules)
    rows.sort(key=rank)
    # Exploration (decision/explore.py): one run on a GPU model whose speed for the job's
    # family is a guess, where what measuring it may save beats the run's extra cost.
    # `exploring`: the (reference model, model) pairs an exploring run is measuring now.
    probe = explore(rows, next((r for r in rows if not r.blockers), None), est, settings,
                    exploring, money)
    if probe is not None:
        rows.remove(probe.row)
        rows.insert(0, probe.row)
    rows += [Row(o, o.owned, o.count, 1, None, "", None, None, None, 0.0, (), [(Block.UNREACHABLE, o.unread)])
             for o in unread_offers(needs, capacity, index.has_onprem, rules.allow, rules.local_only)]
    cash_budget = rules.cash_budget
    alts = [_alternative(r, cash_budget) for r in rows]
    ranked = tuple(alts)
    eligible = [a for a in ranked if a.excluded is None]
    common = dict(kind=classification.kind, classification=classification, alternatives=ranked,
                  currency=rules.cur, currency_rate=rules.rate, decided_by="marginal",
                  notes=tuple(dict.fromkeys(tuple(notes) + ex.notes(
                      index, len(alts), capacity, rules.local_only, alts))))

    queueable = [a for a, r in zip(alts, rows) if a.offer.pooled and r.blockers
                 and all(code == Block.WAIT for code, _ in r.blockers)] if not eligible else []
    if not eligible and queueable and classification.kind == "steady" and not rules.local_only:
        # Nothing can start in time and no cloud may take it: wait for the owned GPUs.
        best = queueable[0]
        choice = dataclasses.replace(best, excluded=None)
        w = "an unknown time" if math.isinf(best.wait_minutes) else f"about {best.wait_minutes:.0f} min"
        reasons = (f"queued on-prem: the cluster is busy for {w} (longer than steady work "
                   f"would wait), and no cloud offer is allowed ({ex.why_not(ranked, CLOUD)}), "
                   "so the job waits for the owned GPUs",
                   ex.estimate_line(choice, money), ex.full_words(choice, money))
        return Decision(target=choice.offer.target, choice=choice, reasons=reasons, **common)

    if not eligible:
        refusal = ex.refusal(needs, index, alts, [r.blockers for r in rows], settings, money,
                             rules.local_only, classification.kind)
        return Decision(target=None, choice=None, reasons=(refusal,), refusal=refusal, **common)

    choice = eligible[0]
    lines = [probe.reason] if probe is not None else ex.rule_lines(
        choice, ranked, eligible, mode, money, settings, rules.allow, rules.value)
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
                     and all(c == Block.SPOT for c, _ in r.blockers)
                     and a.est_cost is not None and a.est_cost < cost), None)
        if spot is not None:
            lines.append(f"on-demand: spot would cost {money(spot.est_cost)}, but {spot.excluded}")
    return Decision(target=choice.offer.target, choice=choice, reasons=tuple(lines),
                    explores=None if probe is None else probe.pair, **common)

