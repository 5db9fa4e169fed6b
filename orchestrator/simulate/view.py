"""What a policy sees of the simulation: where it sends a job (`Choice`), the owned pools and
their queues (`Pool`), and the `View` of the clock, pools, finished runs and cron slots.

A `View` holds no `Simulation`, so no job's true work or speed: the truth stays in the engine.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, cast

from orchestrator.decision.capacity import Running, estimate_start, expected_remaining_s
from orchestrator.decision.estimates import TeamRatios, estimate_ratios, learn_ratios
from orchestrator.decision.models import Capacity, Offer, PastRun, Reservation
from orchestrator.decision.placement import OfferIndex
from orchestrator.simulate.jobs import Ask, believed_hours

if TYPE_CHECKING:
    from orchestrator.settings import Settings


@dataclass(frozen=True, slots=True)
class Choice:
    """Where a policy sends a job; `est_hours` is the policy's estimate (for wait estimates)."""

    offer: Offer
    used: float
    est_hours: Optional[float] = None
    kind: str = ""
    spread: float = 1.0  # how many times `est_hours` the run may take (its uncertainty)
    # When it was expected to start, for exploratory work queued for owned GPUs: past it,
    # the engine asks the policy again, as `orch serve` re-places such a job.
    start_by_h: Optional[float] = None
    explores: Optional[tuple[str, str]] = None  # the pair its run measures (decision/explore.py)


@dataclass
class Pool:
    """One owned GPU pool: a FIFO queue in front of `count` GPUs, like Ray's pending jobs."""

    offer: Offer
    free: float
    running: dict = field(default_factory=dict)  # job index -> (used, start_h, est_h, spread)
    queue: deque = field(default_factory=deque)  # (Ask, Choice)

    @property
    def gpu(self) -> str:
        """The pool's GPU model: load_scenario refuses an owned pool without one."""
        return cast(str, self.offer.gpu)

    def capacity(self, now_h: float, need: float) -> Capacity:
        jobs = [Running(0.0, used, None if est is None else
                        expected_remaining_s(est * 3600, (now_h - start) * 3600, spread))
                for used, start, est, spread in self.running.values()]
        jobs += [Running(0.0, c.used, None if c.est_hours is None else c.est_hours * 3600, queued=True)
                 for _, c in self.queue]
        src = (f"simulated {self.offer.gpu} pool: {self.free:g}/{self.offer.count:g} GPUs free, "
               f"{len(self.running)} running, {len(self.queue)} queued")
        return estimate_start(0.0, self.free, jobs, 0.0, need, src)


class View:
    """What a policy may look at when a job arrives: the clock, owned pools, finished runs,
    the cron schedules' asks. It holds no `Simulation`, so no true work or speed."""

    def __init__(self, settings: Settings, index: OfferIndex, start: float, pools: list[Pool],
                 scheduled: list[Ask]):
        self.settings, self.index, self.start = settings, index, start
        self.pools, self.scheduled, self.now_h = pools, scheduled, 0.0
        self.history: dict[str, list[PastRun]] = {}
        self.finished = 0  # runs in `history`
        self.exploring: set[tuple[str, str]] = set()  # pairs an exploring run measures now
        self._team: tuple[float, int, Optional[TeamRatios]] = (-math.inf, -1, None)
        self._estimates: tuple[float, int, Optional[dict]] = (-math.inf, -1, None)

    def team(self) -> TeamRatios:
        """The team's speed ratios from every finished run, relearned at most once per
        simulated hour (as a server would cache them), so a long trace stays fast."""
        at, n, ratios = self._team
        if ratios is None or (n != self.finished and self.now_h - at >= 1.0):
            ratios = learn_ratios(r for runs in self.history.values() for r in runs)
            self._team = (self.now_h, self.finished, ratios)
        return ratios

    def estimates(self) -> dict[str, list[float]]:
        """The team's estimate ratios (measured / estimated hours per job) from every
        finished run, for learning how far the job files' estimates are off (user bias,
        its error), relearned at most once per simulated hour like `team`."""
        at, n, ratios = self._estimates
        if ratios is None or (n != self.finished and self.now_h - at >= 1.0):
            ratios = estimate_ratios((r for runs in self.history.values() for r in runs), None)
            self._estimates = (self.now_h, self.finished, ratios)
        return ratios

    def epoch(self, hours: float) -> float:
        return self.start + hours * 3600.0

    def hours(self, ask: Ask, gpu: Optional[str], used: float) -> float:
        """What the job file says a run takes on `used` x `gpu` (the default with no estimate)."""
        s = self.settings
        return believed_hours(ask, gpu, used, s.gpu_speeds, s.default_job_hours)

    def pool_for(self, offer: Offer) -> Pool:
        return next(p for p in self.pools if p.offer == offer)

    def can_start_now(self, offer: Offer, used: float) -> bool:
        p = self.pool_for(offer)
        return not p.queue and p.free >= used

    def capacity(self, need: float) -> Optional[Capacity]:
        """The on-prem capacity orch would read from the cluster, for a job of `need` GPUs,
        with the cron-scheduled work due on it within the look-ahead `orch serve` uses."""
        fits = [p for p in self.pools if p.offer.count >= need]
        if not fits:
            return None
        due = self.reservations()
        if len(self.pools) == 1:
            cap = fits[0].capacity(self.now_h, need)
            free = {self.pools[0].gpu: self.pools[0].free if not self.pools[0].queue else 0.0}
            return Capacity(onprem_free=free, wait_minutes=cap.wait_minutes, source=cap.source,
                            can_start_now=cap.can_start_now, reservations=due)
        caps = [p.capacity(self.now_h, need) for p in fits]
        waits = [c.wait_minutes for c in caps if c.wait_minutes is not None]
        free = {p.gpu: (p.free if not p.queue else 0.0) for p in self.pools}
        return Capacity(onprem_free=free, wait_minutes=min(waits) if waits else None,
                        source="; ".join(c.source for c in caps), reservations=due)

    @property
    def lookahead_h(self) -> float:
        """How far ahead cron slots are seen: the cron_lookahead_hours setting, as in `orch serve`."""
        return self.settings.cron_lookahead_hours

    def reservations(self, horizon_h: Optional[float] = None) -> tuple[Reservation, ...]:
        """Cron-scheduled jobs due soon: a trace job of kind `steady` stands for one, and a
        schedule's next slot is known ahead, as `orch serve` knows its schedules'."""
        horizon_h = self.lookahead_h if horizon_h is None else horizon_h
        out = []
        for a in self.scheduled:
            at = a.arrival_h
            if at <= self.now_h:
                continue
            if at > self.now_h + horizon_h:
                break
            out.append(Reservation(in_hours=at - self.now_h, gpus=float(a.gpus),
                                   what=f"cron job {a.name}",
                                   cloud_cost=math.inf if a.rent_usd is None else a.rent_usd,
                                   slack_hours=a.slack_h))
        return tuple(out)


Policy = Callable[[Ask, View], Optional[Choice]]
