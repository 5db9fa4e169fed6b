"""One plan's facts and the decision made from them alone: what `orch plan`, `orch submit`,
schedules and `orch serve` decide on (service/planning.py gathers the facts), and what a
decision test builds. Pure: the facts arrive whole, nothing is read."""

from __future__ import annotations

import dataclasses
from typing import Collection, Optional, Sequence

from orchestrator.base.targets import needs_cloud_credentials
from orchestrator.decision.classify import classify
from orchestrator.decision.models import Capacity, Decision, Offer, PastRun
from orchestrator.decision.placement import decide
from orchestrator.decision.pricing import HoursEstimator


@dataclasses.dataclass(frozen=True)
class Facts:
    """What one plan is made from, gathered once (service.planning.gather): the offers, the
    capacity of the owned hardware (with the schedules due on it), the history and the
    month's spend, and what the plan says about the cluster it read."""
    offers: Sequence[Offer]
    capacity: Optional[Capacity]
    history: Sequence[PastRun]
    spent_this_month: float
    notes: Sequence[str] = ()
    # (reference model, model) pairs an unfinished rented run will measure (explore.in_flight)
    exploring: frozenset = frozenset()

    def with_credentials(self, enabled: Collection[str]) -> Facts:
        """The same facts, each cloud offer saying whether this machine has its credentials."""
        return dataclasses.replace(self, offers=[
            dataclasses.replace(o, credentials=o.cloud in enabled)
            if needs_cloud_credentials(o.target) else o
            for o in self.offers])


def decide_on(spec, settings, facts: Facts, *, fingerprint: str, now: float,
              code_dirty: bool = False, owner: Optional[str] = None) -> Decision:
    """Classify the job and decide where it runs, from `facts` alone (decision.placement)."""
    est = HoursEstimator(spec, fingerprint, facts.history, settings.default_job_hours,
                         settings.gpu_speeds, owner=owner)
    kind = classify(spec, fingerprint, facts.history, now, settings, code_dirty,
                    est.reference.hours)
    return decide(spec, kind, facts.offers, facts.capacity, settings, estimator=est,
                  spent_this_month=facts.spent_this_month, notes=facts.notes,
                  exploring=facts.exploring)
