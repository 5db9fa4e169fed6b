"""What a whole job costs on an offer: hours on that GPU, times price, plus start-up."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from orchestrator.base.targets import LOCAL, ONPREM, OWNED
from orchestrator.decision.estimates import (
    Estimate,
    TeamRatios,
    by_model,
    learn_ratios,
    model_of,
    speed_estimate,
    user_bias,
    user_error,
)
from orchestrator.decision.gpus import CPU, canonical_gpu
from orchestrator.decision.models import Offer, PastRun

HOURS_PER_YEAR = 8766.0
_RECENT = 5  # runs that count towards a measurement: recent code, recent data


@dataclass(frozen=True, slots=True)
class Reference:
    """One known point: this job takes `hours` on `count` x `gpu` (None = CPU)."""

    gpu: Optional[str]
    count: float
    hours: float
    basis: str


def _dev(gpu: Optional[str], count: float) -> str:
    return CPU if gpu is None else f"{gpu}x{int(count) if float(count).is_integer() else count}"


def _measured(n: int, key: tuple) -> str:
    return f"measured: median of {n} run{'s' if n > 1 else ''} on {_dev(*key)}"


def _key(gpu: Optional[str], count: Optional[float]) -> tuple[Optional[str], float]:
    return (None, 0.0) if gpu is None else (canonical_gpu(gpu), float(count or 0))


def reference_device(spec) -> tuple[Optional[str], float]:
    """The device a spec's hints refer to: estimate.gpu, else its first accelerator, else CPU."""
    from orchestrator.decision.gpus import expand

    choices = expand([(c.name, c.count) for c in spec.resources.accelerator_choices()])
    if spec.estimate is not None and spec.estimate.gpu:
        name = spec.estimate.gpu
        count = next((c for g, c in choices if g == canonical_gpu(name)), 1)
        return canonical_gpu(name), count
    if choices:
        return choices[0]
    return None, 0


# How much longer than estimated a run may take (the estimate's uncertainty, as a factor:
# about its 90th percentile over its median), where nothing measured says better.
MEASURED_SPREAD = 1.15  # at least, for a figure measured on the device itself
ESTIMATE_SPREAD = 2.0  # estimate.hours as written (the families' sigma 0.5 gives 1.9)
DEFAULT_SPREAD = 3.0  # no estimate: default_job_hours is a guess


def _spread(basis: str, measured: Optional[tuple[float, int, float]],
            user: Optional[float]) -> float:
    """The uncertainty of a reference figure, by where it came from: measured runs by their
    own spread (max over median), an estimate by its owner's measured error, else the
    constants above."""
    if basis.startswith("measured") and measured is not None:
        return max(MEASURED_SPREAD, measured[2])
    if basis.startswith("estimate.hours"):
        return ESTIMATE_SPREAD if user is None else max(MEASURED_SPREAD, user)
    return DEFAULT_SPREAD


class HoursEstimator:
    """Estimated hours of one job on each (GPU, count), with the basis of each figure.

    One known point first: this fingerprint's most recent measured device (its median
    run), else the spec's `estimate` (times its owner's bias, when their other jobs'
    runs measured one), else `default_hours`. A device measured itself is taken as
    measured; any other is the known point scaled by the job's speed there
    (decision.estimates: its own runs, the team's, the shrunk peak table), assuming the
    work splits evenly over the GPUs. `history`: this job's runs and the team's; `team`,
    when given, the team's ratios learned once for many plans (else from `history`);
    `estimates`, likewise, the owner's `estimate_ratios` (their estimates' bias and error)."""

    def __init__(self, spec, fingerprint: str, history: Iterable[PastRun],
                 default_hours: float = 1.0, speeds: Mapping[str, float] | None = None,
                 *, owner: Optional[str] = None, team: Optional[TeamRatios] = None,
                 estimates: Optional[Mapping[str, list[float]]] = None):
        self.speeds = dict(speeds or {})
        history = list(history)
        mine = [r for r in history if r.fingerprint == fingerprint]
        runs = sorted((r for r in mine if r.succeeded), key=lambda r: r.created_at, reverse=True)
        by_dev: dict[tuple, list[PastRun]] = {}
        for r in runs:
            by_dev.setdefault(_key(r.gpu, r.gpu_count), []).append(r)
        self.measured: dict[tuple, tuple[float, int, float]] = {}  # hours, runs, max/median
        for key, rs in by_dev.items():
            timed = [r.duration_s for r in rs if r.duration_s and r.duration_s > 0][:_RECENT]
            if timed:
                med = statistics.median(timed)
                self.measured[key] = (med / 3600.0, len(timed), max(timed) / med)
        self.own = by_model(mine)
        self.team = team if team is not None else learn_ratios(history, exclude=fingerprint)
        runs = [r for r in runs if r.duration_s and r.duration_s > 0]
        if runs:
            key = _key(runs[0].gpu, runs[0].gpu_count)
            h, n, _ = self.measured[key]
            self.reference = Reference(key[0], key[1], h, _measured(n, key))
        else:
            gpu, count = reference_device(spec)
            if spec.estimate is not None:
                hint = spec.estimate.hours
                basis = f"estimate.hours {hint:g} h on {_dev(gpu, count)}"
                bias = user_bias(history, owner, fingerprint, estimates)
                if bias is not None and abs(bias[0] - 1.0) > 0.05:
                    basis += (f" x {bias[0]:.2g} (the owner's runs took {bias[0]:.2g}x their "
                              f"estimates, median over {bias[1]} job{'s' if bias[1] > 1 else ''})")
                    hint *= bias[0]
                self.reference = Reference(gpu, count, hint, basis)
            else:
                self.reference = Reference(gpu, count, default_hours,
                                           f"no measurement or estimate: assumed {default_hours:g} h "
                                           f"on {_dev(gpu, count)} (give estimate.hours)")
        basis = self.reference.basis
        self.spread = _spread(basis, self.measured.get(_key(self.reference.gpu, self.reference.count)),
                              user_error(history, owner, fingerprint, estimates)
                              if basis.startswith("estimate.hours") else None)
        self._cache: dict[tuple, tuple[Optional[float], str]] = {}

    def speed(self, gpu: Optional[str]) -> Estimate:
        """The job's per-device speed on `gpu` (None: the CPU) over its reference model's."""
        return speed_estimate(model_of(self.reference.gpu), model_of(gpu), self.own, self.team,
                              self.speeds)

    def hours(self, gpu: Optional[str], count: float) -> tuple[Optional[float], str]:
        key = _key(gpu, count)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        out: tuple[Optional[float], str]
        ref = self.reference
        if key in self.measured:
            h, n, _ = self.measured[key]
            out = (h, _measured(n, key))
            if model_of(key[0]) != model_of(ref.gpu) and (own := self.speed(key[0])).kind == "own":
                out = (h, f"{out[1]}: {own.source}")  # the ratio its runs on both models measured
        elif key == (ref.gpu, float(ref.count)):
            out = (ref.hours, ref.basis)
        else:
            est = self.speed(key[0])
            if est.ratio is None:
                out = (None, est.source)
            else:
                n_ref = max(float(ref.count), 1e-9) if ref.gpu is not None else 1.0
                n_new = max(key[1], 1e-9) if key[0] is not None else 1.0
                how = f"scaled: {est.source}" if est.source else f"scaled to {_dev(*key)}"
                out = (ref.hours * n_ref / (est.ratio * n_new), f"{ref.basis}, {how}")
        self._cache[key] = out
        return out


def job_cost(offer: Offer, hours: float, used: float, startup_minutes: float,
             nodes: int = 1) -> tuple[float, Optional[float]]:
    """(full, marginal) USD for a whole job. Cloud bills the whole offer, once for each of
    its `nodes` VMs, for the run plus its start-up; owned hardware bills the share of GPUs
    used, and its marginal cost is the power alone. Marginal is None for cloud, where every
    dollar is marginal."""
    if offer.target not in OWNED:  # not offer.owned, inline: this runs for every alternative
        return offer.price_per_hour * nodes * (hours + startup_minutes / 60.0), None
    share = min(used / offer.count, 1.0) if offer.gpu is not None and offer.count else 1.0
    return offer.price_per_hour * share * hours, offer.power_per_hour * share * hours


def owned_hourly(purchase_price: float, lifetime_years: float, utilization: float,
                 watts: float, electricity_price: float) -> tuple[float, float]:
    """(amortized, power) USD per hour of use: the purchase spread over the hours it is
    expected to be busy in its lifetime, and watts x the electricity price per kWh."""
    amortized = purchase_price / (lifetime_years * HOURS_PER_YEAR * utilization)
    return amortized, watts / 1000.0 * electricity_price


def onprem_offer(inv, electricity_price: float) -> Offer:
    """The offer of one on-prem inventory line (settings.OwnedGpus)."""
    am, pw = owned_hourly(inv.purchase_price, inv.lifetime_years, inv.utilization,
                          inv.watts * inv.count, electricity_price)
    cpu_pool = inv.cpu_pool
    return Offer(target=ONPREM, pooled=True, gpu=None if cpu_pool else canonical_gpu(inv.gpu),
                 count=0 if cpu_pool else inv.count, cpus=getattr(inv, "cpus", None),
                 price_per_hour=am + pw, amortized_per_hour=am, power_per_hour=pw,
                 kwh_price=electricity_price)


def local_offer(machine, electricity_price: float, gpu: Optional[str], count: float,
                cpus: Optional[float], memory_gb: Optional[float]) -> Offer:
    """This machine's offer (settings.LocalMachine); `gpu=None` for its CPU."""
    am, pw = owned_hourly(machine.purchase_price, machine.lifetime_years, machine.utilization,
                          machine.watts, electricity_price)
    return Offer(target=LOCAL, gpu=None if gpu is None else canonical_gpu(gpu),
                 count=count if gpu is not None else 0, price_per_hour=am + pw,
                 cpus=cpus, memory_gb=memory_gb, amortized_per_hour=am, power_per_hour=pw,
                 kwh_price=electricity_price)


def fmt_money(usd: Optional[float], currency: str = "USD", rate: float = 1.0) -> str:
    """USD shown in the user's currency: whole units for currencies like KRW or JPY."""
    if usd is None:
        return "-"
    v = usd * rate
    if abs(v) >= 1000 or currency.upper() in ("KRW", "JPY", "IDR", "VND"):
        return f"{v:,.0f} {currency}"
    return f"{v:,.2f} {currency}" if abs(v) >= 0.1 else f"{v:.3g} {currency}"
