"""A GPU the user might buy, priced against renting the same steady work: payback and verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping, Optional

from orchestrator.decision.gpus import canonical_gpu, relative_speed
from orchestrator.decision.models import Offer
from orchestrator.decision.pricing import fmt_money

HOURS_PER_MONTH = 730.0  # one GPU busy round the clock for a month


@dataclass(frozen=True)
class WhatIf:
    """Figures the user gives instead of the measured or configured ones; None keeps those.
    Money is USD, like the settings."""

    steady_hours: Optional[float] = None  # steady work, H100-hours (reference GPU-hours) a month
    electricity_price: Optional[float] = None  # USD per kWh
    rent_price: Optional[float] = None  # USD per hour to rent a candidate's GPUs (all `count`)
    utilization_cap: Optional[float] = None  # busiest fraction of 730 h/month a candidate runs
    prices: Mapping[str, float] = field(default_factory=dict)  # candidate GPU -> purchase, USD

    def overridden(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if v is not None and k != "prices"}
        if self.prices:
            out["prices"] = dict(self.prices)
        return out



@dataclass
class CandidateAdvice:
    """One GPU the user might buy, priced against renting the same steady work."""

    gpu: str
    count: int
    purchase_price_usd: float
    speed: Optional[float]  # one GPU, H100 = 1.0
    lifetime_months: float
    verdict: str = "unknown"  # buy | rent | unknown
    reason: str = ""
    hours_needed: Optional[float] = None  # wall hours a month the steady work takes on it
    hours_per_month: Optional[float] = None  # what it runs, after the capacity cap
    capped: bool = False
    rent_price_per_hour_usd: Optional[float] = None  # renting the same GPU x count
    rent_basis: str = ""
    rent_avoided_usd: Optional[float] = None  # a month
    power_usd: Optional[float] = None  # a month
    net_usd: Optional[float] = None  # a month: rent avoided - power
    payback_months: Optional[float] = None  # None: never (or unknown, see verdict)
    lifetime_saving_usd: Optional[float] = None  # net x lifetime - purchase
    # The same work rented on whichever on-demand GPU does it cheapest (by relative
    # speed): a second opinion when renting the candidate's own model is poor value.
    cheapest_rent: Optional[dict] = None
    # A buy that holds only once owned GPUs' jobs are fixed (decision.measured_use); "" none.
    condition: str = ""


def _cheapest_rent(offers: Iterable[Offer], gpu: str, count: int) -> tuple[Optional[float], str]:
    """USD/h to rent `count` x `gpu` on demand: an offer of that very size, else the lowest
    per-GPU price of the model times `count`; (None, "") when no catalog has the model."""
    same = [o for o in offers if not o.owned and not o.spot and o.gpu is not None
            and canonical_gpu(o.gpu) == canonical_gpu(gpu) and o.count > 0]
    exact = [o for o in same if o.count == count]
    if exact:
        o = min(exact, key=lambda o: o.price_per_hour)
        return o.price_per_hour, f"cheapest on-demand {gpu} x{count}: {o.cloud}/{o.region}"
    if same:
        o = min(same, key=lambda o: o.price_per_hour / o.count)
        return (o.price_per_hour / o.count * count,
                f"no catalog offer of {gpu} x{count}: {count} x the per-GPU price of "
                f"{o.cloud}/{o.region} {gpu} x{o.count:g}")
    return None, ""


def money(settings, usd: float) -> str:
    return fmt_money(usd, settings.currency, settings.currency_rate)


def _within(months: Optional[float], lifetime: float) -> bool:
    return months is not None and months <= lifetime


def cheapest_work(offers: Iterable[Offer], speeds: Mapping[str, float]) -> Optional[tuple]:
    """(USD per H100-hour, offer) of the on-demand offer that rents work cheapest."""
    best = None
    for o in offers:
        speed = relative_speed(o.gpu, speeds) if o.gpu and o.count else None
        if o.owned or o.spot or not speed:
            continue
        per = o.price_per_hour / (speed * o.count)
        if best is None or per < best[0]:
            best = (per, o)
    return best


def price_candidate(cand, settings, offers, ref_per_month: float, elec: float, cap: float,
               what_if: WhatIf, paid: Optional[float], paid_basis: str) -> CandidateAdvice:
    gpu, count = canonical_gpu(cand.gpu), int(cand.count)
    price = next((float(v) for k, v in what_if.prices.items() if canonical_gpu(k) == gpu),
                 float(cand.purchase_price))
    lifetime = cand.lifetime_years * 12.0
    speed = cand.speed if cand.speed is not None else relative_speed(gpu, settings.gpu_speeds)
    c = CandidateAdvice(gpu=gpu, count=count, purchase_price_usd=price, speed=speed,
                        lifetime_months=lifetime)
    if speed is None:
        c.reason = (f"no speed figure for {gpu}: give the candidate a `speed` (H100 = 1.0) "
                    f"or add it to gpu_speeds")
        return c
    # The work splits evenly over the candidate's GPUs: `count` GPUs at `speed` each.
    c.hours_needed = ref_per_month / (speed * count)
    limit = HOURS_PER_MONTH * cap
    run = c.hours_per_month = min(c.hours_needed, limit)
    c.capped = c.hours_needed > limit
    c.power_usd = cand.watts * count / 1000.0 * run * elec
    rent: Optional[float]
    if what_if.rent_price is not None:
        rent, c.rent_basis = what_if.rent_price, "--rent-price"
    else:
        rent, c.rent_basis = _cheapest_rent(offers, gpu, count)
        if rent is None and paid is not None:
            rent = paid * speed * count
            c.rent_basis = (f"no catalog offer of {gpu}: {money(settings, paid)} per H100-hour, "
                            f"what {paid_basis} paid, x {speed * count:.3g} H100s")
    if rent is None:
        c.reason = (f"no rent price for {gpu} x{count}: no catalog offers it and no cloud job "
                    f"was measured; give --rent-price")
        return c
    c.rent_price_per_hour_usd = rent
    c.rent_avoided_usd = run * rent
    net = c.net_usd = c.rent_avoided_usd - c.power_usd
    c.payback_months = price / net if net > 0 else None
    c.lifetime_saving_usd = net * lifetime - price
    best = cheapest_work(offers, settings.gpu_speeds) if what_if.rent_price is None else None
    if best is not None and run > 0 and run * speed * count * best[0] < c.rent_avoided_usd - 1e-9:
        per, o = best
        avoided = run * speed * count * per
        c.cheapest_rent = {"offer": f"{o.cloud}/{o.region} {o.gpu} x{o.count:g}",
                           "per_ref_hour_usd": per, "rent_avoided_usd": avoided,
                           "payback_months": price / (avoided - c.power_usd)
                           if avoided > c.power_usd else None}
    if run <= 0:
        c.verdict, c.reason = "rent", "no steady work to move onto it"
    elif c.payback_months is None:
        c.verdict, c.reason = "rent", "never pays back: its power costs more than renting the same hours"
    elif c.payback_months > lifetime:
        c.verdict, c.reason = "rent", (f"pays back in {c.payback_months:.1f} months, after its "
                                       f"{lifetime:.0f}-month lifetime")
    elif c.cheapest_rent and not _within(c.cheapest_rent["payback_months"], lifetime):
        # Renting this very model is poor value: the same work rents for less elsewhere.
        alt = c.cheapest_rent["payback_months"]
        c.verdict, c.reason = "rent", (
            f"{c.cheapest_rent['offer']} rents the same work for "
            f"{money(settings, c.cheapest_rent['rent_avoided_usd'])} a month; against that it "
            + (f"pays back in {alt:.1f} months, after its {lifetime:.0f}-month lifetime"
               if alt is not None else "never pays back"))
    else:
        c.verdict, c.reason = "buy", (f"pays back in {c.payback_months:.1f} of its {lifetime:.0f} "
                                      f"months, then saves {money(settings, net)} a month")
    return c

