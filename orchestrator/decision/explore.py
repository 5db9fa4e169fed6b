"""Exploration: rent, on purpose, a GPU model whose speed for a job family is a guess, to measure it.

A job's speed on a GPU model no run of the team has measured is a prior (the shrunk peak
table, or a `gpu_speeds` setting), and a prior that says "not worth renting" is never
tested: no run ever measures the model, so the belief never moves. One run there measures
it. That run is worth its extra cost when what it may save the family's work to come
beats it:

- the family: the team's jobs whose estimates refer to the same GPU model (what the team's
  speed ratio for the pair, `estimates.TeamRatios`, learns from), its work to come the
  rented GPU-hours a day those jobs took (`TeamRatios.rented`) times
  `exploration_horizon_days`;
- what perfect knowledge of the speed would save a job like this one: the expected gap
  between the option chosen and the explored model, over the cases where the model is
  truly the cheaper one (the belief in the speed ratio is lognormal with the spread left
  of the prior's; a put option's closed form);
- one run is 1 / (n + 1 + PRIOR_JOBS) of what the belief will weigh (n: the team's jobs
  already measured on both), so it buys that share of it;
- its cost: the explored row's expected cost (priced at the belief's expected hours) less
  the chosen one's.

Bounded: at most one exploring run per family and GPU model at a time (`in_flight`), and no
run whose extra cost is above `exploration_budget_share` of the family's rent over the
horizon. Only a job that has a run of its own on the reference model (finished, or running
and measured) explores: the team learns a pair's ratio from jobs that ran on both, so a
brand-new job's run on the explored model alone would measure nothing but its own hours
(on 2 A100s, seed 3 of bench_families, nine such runs cost 5.26 USD for no ratio).
Pure: everything arrives as arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Iterable, Optional, Sequence

from orchestrator.base.targets import OWNED
from orchestrator.decision.estimates import PRIOR_JOBS, model_of, prior_log_var
from orchestrator.decision.gpus import SPEED
from orchestrator.decision.models import PastRun
from orchestrator.decision.placement_rules import Row


@dataclass(frozen=True, slots=True)
class Exploration:
    """The exploring option picked: the row, the pair it measures and the figures behind it."""

    row: Row
    pair: tuple[str, str]  # (the family's reference model, the model measured)
    value: float  # USD the run is expected to save the family's work to come
    extra: float  # USD it costs over the option otherwise chosen
    reason: str


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def put_value(k: float, m: float, s: float) -> float:
    """E[(k - Y)^+] for Y = 1 / r with log r ~ N(m, s^2): how much below k the explored
    model's cost per unit falls, in expectation, over the cases where it does."""
    if k <= 0:
        return 0.0
    if s <= 1e-12:
        return max(0.0, k - math.exp(-m))
    z = (math.log(k) + m) / s
    return k * _phi(z) - math.exp(-m + s * s / 2.0) * _phi(z - s)


def belief(base: str, target: str, n: int, peak=SPEED) -> tuple[float, float, float]:
    """The belief in `target`'s speed over `base`'s after n of the team's jobs measured it
    (the estimator's weights, estimates.speed_estimate): (the log variance left of the
    prior's, the sd of how far one more measured job moves its log point, the log variance
    left after that job). The prior's spread is half the peak ratio's log (the shrunk table
    is as likely off by its square root either way), taken as one job's spread too; one
    more job moves the point by its distance from it times its weight, 1 / (n + 1 +
    PRIOR_JOBS)."""
    var0 = prior_log_var(base, target, peak)
    left = lambda k: var0 * PRIOR_JOBS / (k + PRIOR_JOBS)  # noqa: E731
    return left(n), math.sqrt(var0 + left(n)) / (n + 1 + PRIOR_JOBS), left(n + 1)


def explore(rows: Sequence[Row], chosen: Optional[Row], est, settings,
            in_flight: Collection[tuple[str, str]] = (), money=lambda usd: f"{usd:.2f} USD") -> Optional[Exploration]:
    """The cloud row worth running this job on to measure its model, or None. `rows`: the
    priced rows (placement_rules.Row), `chosen`: the one the rules pick, `est`: the job's
    HoursEstimator (its reference model, own runs and the team's ratios)."""
    horizon = settings.exploration_horizon_days
    if not horizon or chosen is None or chosen.score is None or chosen.hours is None:
        return None
    base = model_of(est.reference.gpu)
    rented = est.team.rented.get(base, 0.0) * horizon
    if rented <= 0 or est.reference.gpu is None:
        return None
    share_cap = settings.exploration_budget_share
    job_h = chosen.hours * chosen.used * chosen.nodes  # GPU-hours of this job as chosen
    best: Optional[Exploration] = None
    seen: set[str] = set()
    for r in rows:
        t = r.offer.gpu
        if (r.blockers or r.owned or t is None or r.score is None or r.hours is None
                or r.full is None or r is chosen or t in seen or t == model_of(chosen.offer.gpu)):
            continue
        seen.add(t)  # rows are ranked: the first of a model is its cheapest
        pair = (base, model_of(t))
        if pair in in_flight or pair[0] == pair[1]:
            continue
        speed = est.speed(t)
        if speed.ratio is None or speed.kind in ("own", "same", "none"):
            continue
        on_base = est.own.get(base)
        if on_base is None:
            continue  # no run of this job on the reference model: its run there measures no ratio
        if on_base.data_share is not None and pair in est.team.compute:
            continue  # its own gain follows from its data share and the team's measure
        n = est.team.observed.get(pair, (0.0, 0))[1]
        var, shift, var_after = belief(base, pair[1], n)
        # The log point: a team or peak figure is priced at its expected hours, exp(var / 2) less.
        m = math.log(speed.ratio) + (var / 2.0 if speed.kind in ("team", "peak") else 0.0)
        # The explored row's cost at a ratio r believed: a + b / r (hours go as 1 / r);
        # after one more job, a job like this one is priced at b x exp(var_after / 2) / r'
        # for the moved point r', and takes the model where that is below the chosen cost.
        a = r.full * settings.cloud_startup_minutes / 60.0 / (r.hours + settings.cloud_startup_minutes / 60.0)
        b = (r.full - a) * speed.ratio * math.exp(var_after / 2.0)
        if b <= 0:
            continue
        gain = b * put_value((chosen.score - a) / b, m, shift)  # a job like this one
        value = gain * rented / max(job_h, 1e-9)
        extra = r.score - chosen.score
        cap = share_cap * rented * (chosen.score / max(job_h, 1e-9))
        if value <= max(extra, 0.0) or extra > cap:
            continue
        if best is None or value - extra > best.value - best.extra:
            why = (f"measuring {pair[1]} for this job family ({base} jobs): "
                   f"{'no run measured it' if n == 0 else f'{n} jobs measured it'}, the belief "
                   f"{math.exp(m):.2g}x +-{math.exp(math.sqrt(var)):.2g}x; measuring it may save "
                   f"{money(value)} of {rented:.0f} GPU-hours rented in "
                   f"{horizon:g} days, this run costs {money(max(extra, 0.0))} more")
            best = Exploration(r, pair, value, extra, why)
    return best


def in_flight(active: Iterable[PastRun]) -> frozenset[tuple[str, str]]:
    """The pairs unfinished rented runs will measure once they end: (the model their
    estimate refers to, the model they run on), for each on a model other than that. Any
    such run measures the pair, exploring or not, so none more explores it meanwhile."""
    return frozenset((model_of(r.estimate_gpu), model_of(r.gpu)) for r in active
                     if r.estimate_gpu and r.gpu and r.target is not None and r.target not in OWNED
                     and model_of(r.estimate_gpu) != model_of(r.gpu))
