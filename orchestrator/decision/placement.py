"""Where a job runs: price every fitting offer per job, apply the policy, say why."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Union

from orchestrator.decision.cost import HoursEstimator, fmt_money, job_cost
from orchestrator.decision.demand import job_demand
from orchestrator.decision.gpus import canonical_gpu
from orchestrator.decision.models import (TARGET_ORDER, Alternative, Capacity, Classification,
                                          Decision, Offer, PastRun, share_price)

# Blockers that a setting or a line of the job file can lift, cheapest to suggest first.
_SOFT = ("mode", "allow", "use_spot", "spot", "wait", "hourly", "cost", "month")


class OfferIndex:
    """Offers grouped for matching, built once and shared by many decisions: cloud
    offers by (GPU model, count), owned pools by model, CPU-only machines apart."""

    def __init__(self, offers: Iterable[Offer]):
        self.offers = tuple(offers)
        self.cloud: dict[tuple[str, float], list[Offer]] = {}
        self.owned: dict[str, list[Offer]] = {}
        self.cpu: list[Offer] = []
        for o in self.offers:
            if o.gpu is None:
                self.cpu.append(o)
            elif o.target == "cloud":
                self.cloud.setdefault((canonical_gpu(o.gpu), o.count), []).append(o)
            else:
                self.owned.setdefault(canonical_gpu(o.gpu), []).append(o)
        self.has_onprem = any(o.target == "onprem" for o in self.offers)

    def models(self) -> dict[str, list[float]]:
        """GPU model -> the counts offered."""
        out: dict[str, set] = {}
        for g, c in self.cloud:
            out.setdefault(g, set()).add(c)
        for g, os_ in self.owned.items():
            out.setdefault(g, set()).update(o.count for o in os_)
        return {g: sorted(c) for g, c in sorted(out.items())}


@dataclass(frozen=True, slots=True)
class Needs:
    """A job's resources in the form the matcher wants."""

    choices: tuple[tuple[str, float], ...]  # canonical GPU, count
    cpus: Optional[float]
    memory: Optional[float]
    cloud: Optional[str]
    region: Optional[str]
    use_spot: bool
    gpu_allowed: bool
    gpu_workers: float = 1.0  # GPUs a job without `accelerators` needs to run on GPUs
    gpu_required: bool = False  # a train job with `use_gpu: true`: a GPU for each worker

    @classmethod
    def of(cls, spec) -> "Needs":
        from orchestrator.spec import quantity_min

        r = spec.resources
        cloud, region = r.cloud, r.region
        if r.infra:  # SkyPilot's 'cloud/region[/zone]'
            parts = r.infra.split("/")
            cloud = cloud or parts[0] or None
            region = region or (parts[1] if len(parts) > 1 and parts[1] != "*" else None)
        return cls(choices=tuple((canonical_gpu(c.name), c.count) for c in r.accelerator_choices()),
                   cpus=quantity_min(r.cpus), memory=quantity_min(r.memory),
                   cloud=cloud.lower() if cloud else None, region=region, use_spot=r.use_spot,
                   gpu_allowed=spec.scaling.use_gpu is not False,
                   gpu_workers=float(spec.scaling.num_workers) if spec.train is not None else 1.0,
                   gpu_required=spec.train is not None and spec.scaling.use_gpu is True)

    def describe(self) -> str:
        parts = [", ".join(f"{g}:{c:g}" for g, c in self.choices) or "no accelerator"]
        if self.cpus:
            parts.append(f"{self.cpus:g}+ CPUs")
        if self.memory:
            parts.append(f"{self.memory:g}+ GiB")
        if self.cloud:
            parts.append(f"cloud {self.cloud}" + (f"/{self.region}" if self.region else ""))
        return ", ".join(parts)


def _candidates(needs: Needs, index: OfferIndex) -> list[tuple[Offer, float]]:
    """(offer, GPUs used) for every offer of a requested model and count. Cloud
    instances must match the count exactly, as in SkyPilot; owned pools need enough."""
    out: list[tuple[Offer, float]] = []
    if needs.choices:
        wanted = dict.fromkeys(needs.choices)  # a model named twice is matched once
    elif needs.gpu_allowed:  # any GPU model, one per Ray Train worker
        wanted = dict.fromkeys((g, needs.gpu_workers) for g in index.models())
    else:
        wanted = {}
    for gpu, count in wanted:
        out.extend((o, count) for o in index.cloud.get((gpu, count), ()))
        out.extend((o, count) for o in index.owned.get(gpu, ()) if o.count >= count)
    if not needs.choices:
        out.extend((o, 0.0) for o in index.cpu)
    return out


def _misfit(o: Offer, needs: Needs) -> Optional[str]:
    if needs.cloud and (o.cloud or o.target) != needs.cloud:
        return f"the job asks for cloud {needs.cloud}"
    if needs.region and (o.region or "").lower() != needs.region.lower():
        return f"the job asks for region {needs.region}"
    if needs.cpus and o.cpus is not None and o.cpus < needs.cpus:
        return f"{o.cpus:g} CPUs < {needs.cpus:g}"
    if needs.memory and o.memory_gb is not None and o.memory_gb < needs.memory:
        return f"{o.memory_gb:g} GiB memory < {needs.memory:g}"
    if needs.gpu_required and o.gpu and o.count < needs.gpu_workers:
        # Ray Train would wait forever for a GPU per worker that is not there.
        return (f"{needs.gpu_workers:g} workers with use_gpu: true need {needs.gpu_workers:g} "
                f"GPUs, it has {o.count:g}")
    return None


def _wait(o: Offer, used: float, capacity: Optional[Capacity], spec) -> float:
    if o.target != "onprem" or capacity is None:
        return 0.0
    if capacity.load is not None:
        # What the job would hold on this offer: what its record, its Ray metadata and
        # `orch serve`'s queue will say it holds, should it be chosen.
        need = job_demand(spec, {"gpu": o.gpu, "count": used})
        capacity = capacity.load.start(need, capacity.source)
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


def _rank(a: Alternative, pref: dict) -> tuple:
    o = a.offer
    return (math.inf if a.est_cost is None else a.est_cost, TARGET_ORDER[o.target],
            math.inf if a.est_hours is None else a.est_hours, pref.get(o.gpu, 99),
            o.cloud or "", o.region or "", o.gpu or "", o.count, o.spot, o.price_per_hour,
            o.instance_type or "")


def decide(spec, classification: Classification, offers: Union[Sequence[Offer], OfferIndex],
           capacity: Optional[Capacity], settings, *, fingerprint: str = "",
           history: Iterable[PastRun] = (), estimator: Optional[HoursEstimator] = None,
           spent_this_month: float = 0.0) -> Decision:
    """Decide where one job runs. Pure: everything arrives as arguments.

    Both kinds of work go to the eligible option with the lowest full cost per job,
    owned hardware priced in full (amortized purchase plus power), never as free; ties
    go to owned hardware. On-prem is eligible when it can start within
    `max_wait_minutes`. The kind changes what happens when nothing is eligible: steady
    work queues for the on-prem GPUs when only the wait stands in its way; exploratory
    work never queues (the refusal says what to change). Spot only when the job
    checkpoints and is short. Local-only mode keeps everything on this machine. Budgets
    (the job's, and the month's given `spent_this_month` USD so far) and
    `placement.allow` are hard limits."""
    index = offers if isinstance(offers, OfferIndex) else OfferIndex(offers)
    est = estimator or HoursEstimator(spec, fingerprint, history, settings.default_job_hours,
                                      settings.gpu_speeds)
    needs = Needs.of(spec)
    rate, cur = settings.currency_rate, settings.currency
    money = lambda usd: fmt_money(usd, cur, rate)  # noqa: E731
    local_only = settings.effective_mode == "local"
    allow = set(spec.placement.allow)
    checkpoints = spec.checkpoint.storage is not None
    short_h, startup = settings.short_job_hours, settings.cloud_startup_minutes
    max_cost = spec.budget.max_cost / rate if spec.budget.max_cost else None
    max_hourly = spec.budget.max_hourly / rate if spec.budget.max_hourly else None
    monthly = settings.monthly_budget / rate if settings.monthly_budget else None
    # A list of accelerators states a preference: it breaks ties in cost, never outranks it.
    ordered = spec.resources.accelerators_ordered
    pref = {g: i for i, (g, _) in enumerate(needs.choices)} if ordered else {}

    alts: list[Alternative] = []
    blockers: list[list[tuple[str, str]]] = []  # (code, text) per alternative, same order
    hours_of: dict[tuple, tuple] = {}
    for o, used in _candidates(needs, index):
        misfit = _misfit(o, needs)
        if (o.gpu, used) not in hours_of:  # a few devices, many offers each
            hours_of[o.gpu, used] = est.hours(o.gpu, used)
        hours, basis = hours_of[o.gpu, used]
        full = marginal = None
        if hours is not None:
            full, marginal = job_cost(o, hours, used, startup)
        wait = _wait(o, used, capacity, spec)
        b: list[tuple[str, str]] = []
        if misfit:
            b.append(("fit", misfit))
        else:
            if local_only and o.target != "local":
                b.append(("mode", "local-only mode keeps jobs on this machine"))
            if o.target not in allow:
                b.append(("allow", f"placement.allow excludes {o.target}"))
            if needs.use_spot and o.target == "cloud" and not o.spot:
                b.append(("use_spot", "resources.use_spot asks for spot"))
            elif o.spot and not needs.use_spot:
                if not checkpoints:
                    b.append(("spot", "spot needs checkpoint.storage: a preemption would lose the work"))
                elif hours is not None and hours >= short_h:
                    b.append(("spot", f"spot is for short jobs: {hours:.3g} h >= {short_h:g} h"))
            if hours is None:
                b.append(("speed", basis))
            if o.target == "onprem" and capacity is not None and capacity.unreachable:
                b.append(("unreachable", capacity.unreachable))
            elif wait > settings.max_wait_minutes:
                b.append(("wait", f"on-prem busy: wait {_minutes(wait)} > max "
                                  f"{settings.max_wait_minutes:g} min"))
            per_h = share_price(o, used)
            if max_hourly is not None and per_h > max_hourly:
                b.append(("hourly", f"{money(per_h)}/h > budget.max_hourly "
                                    f"{money(max_hourly)}"))
            if max_cost is not None and full is not None and full > max_cost:
                b.append(("cost", f"{money(full)} > budget.max_cost {money(max_cost)}"))
            if monthly is not None and full is not None and spent_this_month + full > monthly:
                b.append(("month", f"{money(spent_this_month)} spent this month + {money(full)} "
                                   f"> monthly_budget {money(monthly)}"))
        alts.append(Alternative(offer=o, est_hours=hours, est_cost=full, marginal_cost=marginal,
                                hours_basis=basis, used=used, wait_minutes=wait,
                                excluded="; ".join(t for _, t in b) if b else None))
        blockers.append(b)

    order = sorted(range(len(alts)), key=lambda i: _rank(alts[i], pref))
    ranked = tuple(alts[i] for i in order)
    eligible = [a for a in ranked if a.excluded is None]
    notes = _notes(index, len(alts), capacity, local_only)
    common = dict(kind=classification.kind, classification=classification, alternatives=ranked,
                  currency=cur, currency_rate=rate, notes=notes)

    queueable = [a for a, b in zip(alts, blockers) if a.offer.target == "onprem"
                 and b and all(code == "wait" for code, _ in b)]
    if not eligible and queueable and classification.kind == "steady" and not local_only:
        # Nothing can start now and no cloud may take it: wait for the owned GPUs.
        best = min(queueable, key=lambda a: _rank(a, pref))
        choice = dataclasses.replace(best, excluded=None)
        w = "an unknown time" if math.isinf(best.wait_minutes) else f"about {best.wait_minutes:.0f} min"
        reasons = (f"queued on-prem: the cluster is busy for {w} (more than max_wait_minutes "
                   f"{settings.max_wait_minutes:g}), and no cloud offer is allowed "
                   f"({_why_not(ranked, 'cloud')}), so the job waits for the owned GPUs",
                   f"estimated {choice.est_hours:.3g} h ({choice.hours_basis}), "
                   f"{money(choice.est_cost)} per job")
        return Decision(target="onprem", choice=choice, reasons=reasons, **common)

    if not eligible:
        refusal = _refusal(needs, index, alts, blockers, settings, money, local_only,
                           classification.kind)
        return Decision(target=None, choice=None, reasons=(refusal,), refusal=refusal, **common)

    choice = eligible[0]  # the lowest full cost per job; ties go to owned hardware
    codes = {id(a): {c for c, _ in bl} for a, bl in zip(alts, blockers)}
    if local_only:
        reasons = [f"local-only mode keeps every job on this machine; cheapest here per job: "
                   f"{_what(choice)}"]
    else:
        reasons = [_cost_line(choice, ranked, eligible, codes, settings, allow, money),
                   *_kind_line(choice, ranked, codes, classification.kind, settings)]
    reasons.append(f"estimated {choice.est_hours:.3g} h ({choice.hours_basis}), "
                   f"{money(choice.est_cost)} per job")
    if choice.offer.owned and choice.marginal_cost is not None:
        amortized = choice.est_cost - choice.marginal_cost
        reasons.append(f"owned hardware is priced in full: {money(amortized)} amortized purchase + "
                       f"{money(choice.marginal_cost)} power (the power alone is the marginal cost, "
                       "shown for information)")
    if choice.offer.spot:
        reasons.append(f"spot: the job checkpoints to {spec.checkpoint.storage} and is short")
    elif choice.offer.target == "cloud":
        only_spot = {id(a) for a, b in zip(alts, blockers) if b and all(c == "spot" for c, _ in b)}
        spot = next((a for a in ranked if id(a) in only_spot and a.est_cost < choice.est_cost), None)
        if spot is not None:
            reasons.append(f"on-demand: spot would cost {money(spot.est_cost)}, but {spot.excluded}")
    return Decision(target=choice.offer.target, choice=choice, reasons=tuple(reasons),
                    decided_by="full", **common)


def _minutes(m: float) -> str:
    return "unknown" if math.isinf(m) else f"{m:.0f} min"


def _cost_line(choice: Alternative, ranked: Sequence[Alternative], eligible: Sequence[Alternative],
               codes: dict, settings, allow: set, money) -> str:
    """Why this option: its full cost per job against the cheapest option of the other
    kind (owned hardware against cloud), or else at another target, eligible or not."""
    mine = f"{_what(choice)} is cheapest per job: {money(choice.est_cost)}"
    owned = choice.offer.owned
    other = (next((a for a in eligible if a.offer.owned != owned), None)
             or next((a for a in eligible if a.offer.target != choice.offer.target), None))
    if other is not None:
        return f"{mine} vs {_what(other)} {money(other.est_cost)}"
    runner_up = next((a for a in eligible if a is not choice), None)
    if runner_up is not None:
        mine += f" vs {_what(runner_up)} {money(runner_up.est_cost)}"
    rest = [a for a in ranked if a.offer.owned != owned]
    priced = [a for a in rest if a.est_cost is not None]
    if priced:
        a = priced[0]
        # A busy cluster is the kind's business: the next reason says what it changes.
        why = "" if codes[id(a)] == {"wait"} else f" but {a.excluded}"
        return f"{mine}; {_what(a)} would cost {money(a.est_cost)}{why}"
    if rest:
        return f"{mine}; {_what(rest[0])}: {rest[0].excluded}"
    if not owned:
        why = ("no owned GPU has the job's resources" if settings.onprem
               else "no on-prem GPUs configured")
    elif settings.effective_mode == "local":
        why = "local-only mode"
    elif "cloud" not in allow:
        why = "placement.allow excludes cloud"
    elif not settings.clouds:
        why = "no cloud enabled (ORCH_CLOUDS)"
    else:
        why = "no cloud offer has the job's resources"
    return f"{mine}; {why}"


def _kind_line(choice: Alternative, ranked: Sequence[Alternative], codes: dict, kind: str,
               settings) -> list[str]:
    """What the job's kind changed: may it wait, or queue, for the on-prem GPUs."""
    onp = next((a for a in ranked if a.offer.target == "onprem" and codes[id(a)] <= {"wait"}), None)
    if onp is None:  # no owned GPUs to wait for, or excluded for other reasons
        return []
    if onp.excluded is None:
        when = "now" if onp.wait_minutes <= 0 else f"in about {_minutes(onp.wait_minutes)}"
        return [f"{kind} work may wait up to {settings.max_wait_minutes:g} min for owned GPUs: "
                f"{_what(onp)} can start {when}"]
    burst = "cloud burst" if choice.offer.target == "cloud" else "not on-prem"
    queue = ("steady work queues for owned GPUs only when nothing else is allowed"
             if kind == "steady" else "exploratory work never queues for owned GPUs")
    return [f"{burst}: {onp.excluded} ({queue})"]


def _where(a: Alternative) -> str:
    o = a.offer
    return {"onprem": "on-prem", "local": "local"}.get(o.target) or f"{o.cloud}/{o.region}"


def _what(a: Alternative) -> str:
    o = a.offer
    dev = "CPU" if o.gpu is None else f"{o.gpu}x{a.used:g}"
    return f"{_where(a)} {dev}{' spot' if o.spot else ''}"


def _why_not(ranked: Sequence[Alternative], target: str) -> str:
    ex = [a.excluded for a in ranked if a.offer.target == target and a.excluded]
    if not ex and not any(a.offer.target == target for a in ranked):
        return f"no {target} offer has the job's resources"
    return ex[0] if ex else f"{target} is not cheaper"


def _notes(index: OfferIndex, listed: int, capacity: Optional[Capacity], local_only: bool) -> tuple:
    notes = []
    if len(index.offers) > listed:
        notes.append(f"{len(index.offers) - listed} offers of other GPU models or counts not listed")
    checked = capacity is not None and (capacity.onprem_free is not None
                                        or capacity.can_start_now is not None
                                        or capacity.load is not None)
    if index.has_onprem and not local_only:
        if checked:
            notes.append(f"on-prem capacity: {capacity.source}")
        elif capacity is None or not capacity.unreachable:
            notes.append("on-prem capacity not checked: assumed free")
    return tuple(notes)


_FIX = {
    "mode": lambda a, s, m: "set mode = \"hybrid\" (ORCH_MODE=hybrid)",
    "allow": lambda a, s, m: f"add '{a.offer.target}' to placement.allow",
    "use_spot": lambda a, s, m: "set resources.use_spot: false",
    "spot": lambda a, s, m: "set checkpoint.storage and keep the job short, or use on-demand",
    "wait": lambda a, s, m: (f"raise max_wait_minutes to {a.wait_minutes:g}"
                             if not math.isinf(a.wait_minutes) else "free on-prem GPUs"),
    "hourly": lambda a, s, m: f"raise budget.max_hourly to at least {m(a.price_per_hour)}",
    "cost": lambda a, s, m: f"raise budget.max_cost to at least {m(a.est_cost)}",
    "month": lambda a, s, m: (next(x for x in a.excluded.split("; ") if "spent this month" in x)
                              + ": raise monthly_budget (ORCH_MONTHLY_BUDGET) or wait for next "
                              "month; `orch cost --by month` shows this month's spend"),
}


def _refusal(needs: Needs, index: OfferIndex, alts: list[Alternative], blockers: list,
             settings, money, local_only: bool, kind: str = "exploratory") -> str:
    """Nothing fits: say what the cheapest change would be."""
    if not alts:
        have = [f"{g}x{c:g}" for g, counts in index.models().items() for c in counts]
        where = "this machine has" if local_only else "no offer has"
        msg = f"nothing fits: {where} {needs.describe()}"
        if needs.choices:
            msg += f" (offered: {', '.join(have[:12]) or 'CPU only'})"
        if local_only:
            msg += "; set mode = \"hybrid\" and enable clouds (ORCH_CLOUDS) or on-prem GPUs"
        else:
            msg += "; change resources.accelerators or enable a cloud that has it (ORCH_CLOUDS)"
        return msg
    down = next((t for b in blockers for c, t in b if c == "unreachable"), None)
    if down:  # the cluster being down is the news, whatever else would also have to change
        rest = [(a, b) for a, b in zip(alts, blockers) if all(c != "unreachable" for c, _ in b)]
        if not rest:
            return down
        return f"{down}. " + _refusal(needs, index, [a for a, _ in rest], [b for _, b in rest],
                                      settings, money, local_only, kind)
    soft = [i for i, b in enumerate(blockers) if b and all(code in _SOFT for code, _ in b)]
    if soft:
        best = min(soft, key=lambda i: (len(blockers[i]), alts[i].est_cost or math.inf))
        a = alts[best]
        fixes = "; ".join(dict.fromkeys(_FIX[c](a, settings, money) for c, _ in blockers[best]))
        if kind == "exploratory" and {c for c, _ in blockers[best]} == {"wait"}:
            fixes += ", or set schedule.kind: steady so the job queues for the owned GPUs"
        return (f"nothing fits. The nearest option, {_what(a)} at {money(a.est_cost)} per job, "
                f"would need: {fixes}")
    misfits = sorted({t for b in blockers for c, t in b if c in ("fit", "speed", "unreachable")})
    return (f"nothing fits {needs.describe()}: " + "; ".join(misfits[:4]) +
            " - change resources or enable more clouds (ORCH_CLOUDS)")
