"""The placement policies compared: orch's own planner and the simple rules people use today.

Each policy is a function (ask, view) -> Choice, or None when its rule has no place
for the job. All of them choose among the same offers (`Ask.candidates`, from orch's
matcher) and are accounted the same way by the engine. None can read a job's true work:
an `Ask` carries the job file's estimate only.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional

from orchestrator.base.targets import ONPREM
from orchestrator.decision.classify import classify
from orchestrator.decision.gpus import relative_speed
from orchestrator.decision.models import Offer
from orchestrator.decision.placement import decide
from orchestrator.decision.pricing import HoursEstimator, job_cost
from orchestrator.simulate.engine import Choice, View
from orchestrator.simulate.jobs import Ask, believed_speeds
from orchestrator.simulate.online import NAME as ONLINE_TRUTH
from orchestrator.simulate.online import online_truth

HYPERSCALERS = ("aws", "gcp", "azure")


def orch(a: Ask, view: View) -> Optional[Choice]:
    """orch's planner, as `orch submit` runs it: classify against the runs that have
    finished so far, estimate from them and the team's (its speed ratios, how far the job
    files' estimates run off), read the on-prem capacity, `decide`. Given true speeds (--beliefs
    truth) its estimator reads those and the true estimate, not the measured runs."""
    s, fp = view.settings, a.fingerprint
    history = view.history.get(fp, ())
    if a.told_truth:  # the true figures, as settings taken as given; no learning
        est = HoursEstimator(a.spec, fp, (), s.default_job_hours, believed_speeds(a, s.gpu_speeds))
    else:
        est = HoursEstimator(a.spec, fp, history, s.default_job_hours, s.gpu_speeds,
                             team=view.team(), estimates=view.estimates())
    kind = classify(a.spec, fp, history, view.epoch(view.now_h), s, False, est.reference.hours)
    d = decide(a.spec, kind, view.index, view.capacity(a.gpus), s, fingerprint=fp,
               estimator=est, exploring=view.exploring)
    if d.choice is None:
        return None
    promise = (view.now_h + d.choice.wait_minutes / 60.0 if d.kind == "exploratory"
               and d.choice.offer.owned and not math.isinf(d.choice.wait_minutes) else None)
    if d.explores is not None:
        view.exploring.add(d.explores)  # until its run ends (engine.py)
    return Choice(d.choice.offer, d.choice.used, d.choice.est_hours, d.kind, est.spread, promise,
                  d.explores)


def _per_hour(options: Iterable[tuple[Offer, float]], speeds) -> Optional[tuple[Offer, float]]:
    """The lowest price per hour; among equals the faster GPU, then a fixed order."""
    return min(options, default=None,
               key=lambda ou: (ou[0].price_per_hour, -(relative_speed(ou[0].gpu, speeds) or 0),
                               ou[0].cloud or "", ou[0].region or "", ou[0].instance_type or ""))


def _cloud(a: Ask, view: View, clouds=None, spot: Optional[bool] = None) -> Optional[Choice]:
    """Cheapest price per hour in the cloud; spot only for a job that checkpoints (a
    preemption would lose an unsaved run), as anyone renting spot by hand would."""
    spot_ok = a.checkpoints if spot is None else spot
    best = _per_hour(((o, u) for o, u in a.candidates if not o.owned
                      and (spot_ok or not o.spot) and (clouds is None or o.cloud in clouds)),
                     view.settings.gpu_speeds)
    return None if best is None else Choice(best[0], best[1])


def _owned(a: Ask) -> list[tuple[Offer, float]]:
    return [(o, u) for o, u in a.candidates if o.target == ONPREM]


def cloud_cheapest(a: Ask, view: View) -> Optional[Choice]:
    """Cloud only, the lowest price per hour (not per job)."""
    return _cloud(a, view)


def owned_first(a: Ask, view: View) -> Optional[Choice]:
    """Owned GPUs whenever enough are free now (as if they cost nothing), else the cloud's
    lowest price per hour; a job no cloud offer fits queues for the owned GPUs."""
    owned = _owned(a)
    free = next(((o, u) for o, u in owned if view.can_start_now(o, u)), None)
    if free is not None:
        return Choice(*free)
    cloud = _cloud(a, view)
    if cloud is not None:
        return cloud
    return Choice(*owned[0]) if owned else None


def owned_only(a: Ask, view: View) -> Optional[Choice]:
    """Queue every job for the owned GPUs (the pool with the most free GPUs)."""
    owned = _owned(a)
    if not owned:
        return None
    o, u = max(owned, key=lambda ou: view.pool_for(ou[0]).free - len(view.pool_for(ou[0]).queue))
    return Choice(o, u)


def on_demand(a: Ask, view: View) -> Optional[Choice]:
    """A hyperscaler's on-demand instances only (AWS, GCP, Azure), lowest price per hour."""
    return _cloud(a, view, clouds=HYPERSCALERS, spot=False)


def _cheapest_per_job(a: Ask, view: View) -> Optional[Choice]:
    """The cloud option with the lowest cost for the whole job by its file's estimate
    (spot for a job that checkpoints), start-up included."""
    startup = view.settings.cloud_startup_minutes
    best = min(((job_cost(o, view.hours(a, o.gpu, u), u, startup)[0], o.cloud or "",
                 o.region or "", o.instance_type or "", i)
                for i, (o, u) in enumerate(a.candidates)
                if not o.owned and (a.checkpoints or not o.spot)), default=None)
    return None if best is None else Choice(*a.candidates[best[-1]])


def by_kind_strict(a: Ask, view: View) -> Optional[Choice]:
    """The product's rule with no judgement: exploratory work always rents the cheapest
    GPU per job; steady work always queues for the owned GPUs."""
    if a.kind == "steady":
        owned = owned_only(a, view)
        if owned is not None:
            return owned
    return _cheapest_per_job(a, view) or owned_only(a, view)


BASELINES = {"cloud-cheapest": cloud_cheapest, "owned-first": owned_first,
             "owned-only": owned_only, "by-kind-strict": by_kind_strict, "on-demand": on_demand}
# `online-truth` is a reference, not a baseline: `simulate` runs it on the jobs told the
# truth (it reads their true hours), and the checks judge orch's power + cloud by it.
POLICIES = {"orch": orch, ONLINE_TRUTH: online_truth, **BASELINES}
