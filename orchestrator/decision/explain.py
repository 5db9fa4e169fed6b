"""Placement's words: how an option is named and priced, the rule that decided, the notes,
and the refusal's advice."""

from __future__ import annotations

import math
from typing import Optional, Sequence

from orchestrator.base.targets import CLOUD, LOCAL, ONPREM, OWNED
from orchestrator.decision.matching import Needs, OfferIndex
from orchestrator.decision.models import Alternative, Capacity

# Blockers that a setting or a line of the job file can lift, cheapest to suggest first.
SOFT = ("mode", "allow", "use_spot", "spot", "wait", "hourly", "cost", "month", "backfill", "due",
        "credentials")


def minutes(m: float) -> str:
    return "unknown" if math.isinf(m) else f"{m:.0f} min"


def where(a: Alternative) -> str:
    o = a.offer
    return {ONPREM: "on-prem", LOCAL: "local"}.get(o.target) or f"{o.cloud}/{o.region}"


def what(a: Alternative) -> str:
    o = a.offer
    dev = "CPU" if o.gpu is None else f"{o.gpu}x{a.used:g}"
    nodes = f" on {a.nodes} nodes" if a.nodes > 1 else ""
    return f"{where(a)} {dev}{nodes}{' spot' if o.spot else ''}"


def when(a: Alternative) -> str:
    return "now" if a.wait_minutes <= 0 else f"in about {minutes(a.wait_minutes)}"


def dispatch_words(a: Alternative, money) -> str:
    """What choosing this option changes in cash: rent, or power plus what it displaces."""
    if not a.offer.owned:
        return f"{money(a.est_cost)} to rent"
    text = f"{money(a.power_cost)} of power"
    if a.congestion:
        text += f" + {money(a.congestion)} for the work it would push out ({a.displaces})"
    return text


def full_words(a: Alternative, money) -> str:
    """An owned option's full cost, shown for the record beside what decided."""
    amortized = (a.est_cost or 0.0) - (a.power_cost or 0.0)
    text = (f"full cost for the record: {money(a.est_cost)} per job = {money(amortized)} "
            f"amortized purchase + {money(a.power_cost)} power; the power decided, as it is "
            "what running the job changes in cash")
    if a.offer.unpriced:
        text += " (the purchase price is unknown, so the full cost counts power only)"
    return text


def why_not(ranked: Sequence[Alternative], target: str) -> str:
    ex = [a.excluded for a in ranked if a.offer.target == target and a.excluded]
    if not ex and not any(a.offer.target == target for a in ranked):
        return f"no {target} offer has the job's resources"
    return ex[0] if ex else f"{target} is not cheaper"


def no_cloud_words(ranked: Sequence[Alternative], settings, allow: set) -> str:
    """Why no rented GPU can take the job, in the words of its first cause."""
    if settings.effective_mode == "local":
        return "local-only mode"
    if CLOUD not in allow:
        return "placement.allow excludes cloud"
    if not settings.clouds and not any(not a.offer.owned for a in ranked):
        return "no cloud enabled (ORCH_CLOUDS)"
    return why_not(ranked, CLOUD)


def notes(index: OfferIndex, listed: int, capacity: Optional[Capacity], local_only: bool,
          alts: Sequence[Alternative]) -> tuple[str, ...]:
    out = []
    listed -= sum(1 for a in alts if a.offer.unread)  # a stand-in is no offer of the index
    if len(index.offers) > listed:
        out.append(f"{len(index.offers) - listed} offers of other GPU models or counts not listed")
    if capacity is not None and capacity.unreachable and not local_only:
        out.append(capacity.unreachable)
    if index.has_onprem and not local_only:
        if capacity is not None and (capacity.onprem_free is not None
                                     or capacity.can_start_now is not None
                                     or capacity.load is not None):  # it was checked
            out.append(f"on-prem capacity: {capacity.source}")
        elif capacity is None or not capacity.unreachable:
            out.append("on-prem capacity not checked: assumed free")
    out.extend(dict.fromkeys(a.offer.unpriced for a in alts if a.offer.unpriced))
    return tuple(out)


FIX = {
    "mode": lambda a, s, m: "set mode = \"hybrid\" (ORCH_MODE=hybrid)",
    "allow": lambda a, s, m: f"add '{a.offer.target}' to placement.allow",
    "use_spot": lambda a, s, m: "set resources.use_spot: false",
    "spot": lambda a, s, m: "set checkpoint.storage, or use on-demand",
    "wait": lambda a, s, m: (f"raise max_wait_minutes to {a.wait_minutes:g}"
                             if not math.isinf(a.wait_minutes) else "free on-prem GPUs"),
    "hourly": lambda a, s, m: f"raise budget.max_hourly to at least {m(a.price_per_hour)}",
    "cost": lambda a, s, m: f"raise budget.max_cost to at least {m(a.budget_cost)}",
    "month": lambda a, s, m: (next(x for x in a.excluded.split("; ") if "spent this month" in x)
                              + ": raise monthly_budget (ORCH_MONTHLY_BUDGET) or wait for next "
                              "month; `orch cost --by month` shows this month's spend"),
    "backfill": lambda a, s, m: "set exploratory_backfill = true",
    "due": lambda a, s, m: "set schedule.kind: steady so the job queues for the owned GPUs",
    "credentials": lambda a, s, m: f"credentials for {a.offer.cloud} (`sky check {a.offer.cloud}` "
                                   "says what it needs)",
}


def refusal(needs: Needs, index: OfferIndex, alts: list[Alternative], blockers: list,
            settings, money, local_only: bool, kind: str = "exploratory") -> str:
    """Nothing fits: say what the cheapest change would be."""
    if not alts:
        have = [f"{g}x{c:g}" for g, counts in index.models().items() for c in counts]
        at = "this machine has no" if local_only else "no offer has"
        msg = f"nothing fits: {at} {needs.describe()}"
        if needs.choices:
            msg += f" (offered: {', '.join(have[:12]) or 'CPU only'})"
        if local_only:
            msg += "; set mode = \"hybrid\" and enable clouds (ORCH_CLOUDS) or on-prem GPUs"
        elif not index.has_onprem and settings.ray_address:
            msg += ("; the on-prem cluster at ORCH_RAY_ADDRESS reported no nodes that fit "
                    "(`orch cluster status` shows what it has)")
        else:
            msg += "; change resources.accelerators or enable a cloud that has it (ORCH_CLOUDS)"
        return msg
    down = next((t for b in blockers for c, t in b if c == "unreachable"), None)
    if down:  # the cluster being down is the news, whatever else would also have to change
        rest = [(a, b) for a, b in zip(alts, blockers) if all(c != "unreachable" for c, _ in b)]
        if not rest:
            return down
        return f"{down}. Without it: " + refusal(needs, index, [a for a, _ in rest],
                                                 [b for _, b in rest], settings, money,
                                                 local_only, kind)
    soft = [i for i, b in enumerate(blockers) if b and all(code in SOFT for code, _ in b)]
    if soft:
        best = min(soft, key=lambda i: (len(blockers[i]), alts[i].est_cost or math.inf))
        a = alts[best]
        fixes = "; ".join(dict.fromkeys(FIX[c](a, settings, money) for c, _ in blockers[best]))
        if kind == "exploratory" and {c for c, _ in blockers[best]} == {"wait"}:
            fixes += ", or set schedule.kind: steady so the job queues for the owned GPUs"
        return (f"nothing fits. The nearest option, {what(a)} at {money(a.est_cost)} per job, "
                f"would need: {fixes}")
    misfits = sorted({t for b in blockers for c, t in b if c in ("fit", "speed", "unreachable")})
    return (f"nothing fits {needs.describe()}: " + "; ".join(misfits[:4]) +
            " - change resources or enable more clouds (ORCH_CLOUDS)")


def estimate_line(a: Alternative, money) -> str:
    return f"estimated {a.est_hours:.3g} h ({a.hours_basis}), {money(a.est_cost)} per job in full"


def no_owned(allow: set, settings) -> str:
    """Why no owned GPU was an option at all."""
    if not OWNED & set(allow):
        return "placement.allow excludes them"
    return ("none has the job's resources" if settings.onprem or settings.ray_address
            else "no on-prem GPUs configured")


def rule_lines(choice: Alternative, ranked: Sequence[Alternative], eligible: Sequence[Alternative],
               mode: str, money, settings, allow: set, value: float) -> list[str]:
    """The rule that decided (`mode`, as placement applied it), with the figures a user can
    check; `value` is turnaround_value_per_hour in USD."""
    mine = f"{what(choice)} at {dispatch_words(choice, money)}"
    rival = next((a for a in eligible if a.offer.owned != choice.offer.owned), None)
    vs = f", against {what(rival)} at {dispatch_words(rival, money)}" if rival else ""
    if mode == "local":
        return [f"local-only mode keeps every job on this machine; cheapest here: {mine}"]
    lines = []
    # Why the first owned option the job may use was ruled out, if one was.
    owned_why = next((a.excluded for a in ranked
                      if a.offer.owned and a.offer.target in allow and a.excluded), None)
    if choice.offer.owned:
        if mode == "steady":
            lines.append(f"steady work runs on owned GPUs: {what(choice)} can start "
                         f"{when(choice)}, {dispatch_words(choice, money)}, the marginal "
                         f"cost that decided{vs}")
        elif mode == "fallback":
            lines.append(f"no rentable GPU can take it ({no_cloud_words(ranked, settings, allow)}"
                         f"), so it runs on owned GPUs: {what(choice)} can start "
                         f"{when(choice)}, {dispatch_words(choice, money)}")
        else:
            idle = ("is idle now" if not choice.wait_minutes else
                    f"frees in {minutes(choice.wait_minutes)}, within the "
                    f"{settings.exploratory_wait:g} min exploratory work waits (renting "
                    "takes the cloud's start-up anyway),")
            late = (f"it would make {choice.displaces} late, priced as renting for it"
                    if choice.displaces else "no work queued or due on it would be made late")
            lines.append(f"exploratory backfill: {what(choice)} {idle} and stays free for "
                         f"the job's {choice.est_hours:.3g} h ({late}), so it runs there for "
                         f"{dispatch_words(choice, money)}, the marginal cost that decided{vs}")
    else:
        runner_up = next((a for a in eligible if a is not choice and not a.offer.owned), None)
        cheapest = f"the cheapest rentable GPU per job: {mine}" + (
            f" vs {what(runner_up)} {money(runner_up.est_cost)}" if runner_up else "")
        if mode == "steady" and rival is not None:
            lines.append(f"steady work on {cheapest}: it costs less than {what(rival)} at "
                         f"{dispatch_words(rival, money)}")
        elif mode == "steady" and owned_why is not None and any(
                c.startswith("on-prem busy") for c in owned_why.split("; ")):
            lines.append(f"cloud burst: steady work waits for owned GPUs only while it can: "
                         f"{owned_why}; so it runs on {cheapest}")
        elif mode == "steady":
            lines.append(f"steady work on {cheapest}; owned GPUs: " + (
                owned_why if owned_why is not None else no_owned(allow, settings)))
        else:
            lines.append(f"exploratory work rents {cheapest}")
            if owned_why is not None:
                lines.append(f"not on owned GPUs: {owned_why}")
            elif rival is not None:
                lines.append(f"{what(rival)} is idle but ranks behind it: "
                             f"{dispatch_words(rival, money)}")
    if value and rival is not None:
        lines.append(f"ranked by cost + {money(value)} per hour until done: "
                     f"{what(choice)} {money(choice.score)} vs {what(rival)} "
                     f"{money(rival.score)}")
    return lines
