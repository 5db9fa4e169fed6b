"""The discrete-event simulation: jobs arrive, a policy places each, owned GPUs queue, costs add up.

Time is hours after the trace's start. Every policy is accounted the same two ways:
- the team's cash for the period: ownership of the owned GPUs (purchase x days /
  (lifetime_years x 365.25), the same under every policy), the power of the hours they
  run jobs, and the cloud's bills (each launch's run plus its billed start-up);
- the old per-use chargeback, kept for comparison: an owned job pays its share of the
  pool's full hourly cost (amortized purchase at the assumed utilization + power), which
  makes idle owned hours free and used ones dear.
True run hours on a device are the trace's work scaled by the job's true speed there
(its `speeds`, else the table's ratio). Policies never see them: a policy is handed the
job's `Ask` and a `View` holding only what orch could know (the clock, the pools' free
GPUs and queues, the runs finished so far as a runner records them, what a running run's
first report measured (its throughput and data share, `first_report_h` after it starts,
as `orch serve` reads a running job's last report), the schedules' own estimates); the
truth stays in `Simulation`.

Spot: a spot job is preempted at a constant rate per running hour (default 5 %),
drawn from a generator seeded by (seed, job), so every policy that puts the same job
on spot for as long meets the same preemptions. Each preemption costs one more billed
start-up (and its delay) and redoes the work since the last checkpoint (15 min).
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from orchestrator.base.targets import ONPREM
from orchestrator.decision.models import Offer, PastRun
from orchestrator.decision.placement import OfferIndex
from orchestrator.decision.pricing import job_cost
from orchestrator.simulate.jobs import REF_THROUGHPUT, SimJob, data_share, owned_cost, true_hours
from orchestrator.simulate.trace import Trace
from orchestrator.simulate.view import Choice, Policy, Pool, View

__all__ = ["Choice", "Outcome", "Policy", "Pool", "PolicyRun", "Simulation", "View", "preemptions"]

if TYPE_CHECKING:
    from orchestrator.settings import Settings

SPOT_PREEMPTIONS_PER_H = 0.05
LOST_WORK_H = 0.25
RECHECK_H = 1 / 60  # a queued job is re-placed this long after its expected start passed
# A run's first measurement of its throughput and data share reaches orch this long after
# it starts training, by default: the runner's `measure` after its first minute of steps
# (jobs/context.py MEASURE_AFTER_S), read into the store by `orch serve`'s next pass
# (serve_period_s, 15 s). `orch simulate --first-report-minutes` sets it (a loop that
# reports only per epoch, without orch's step timer: its first epoch's length); a run
# shorter than that reports only as it ends.
FIRST_REPORT_H = (60.0 + 15.0) / 3600.0


@dataclass(slots=True)
class Outcome:
    index: int
    target: Optional[str]  # None: no policy rule could place it
    where: str = "-"
    start_h: Optional[float] = None
    finish_h: Optional[float] = None
    wait_h: Optional[float] = None
    cost: float = 0.0  # per-use chargeback: full cost of owned hours, or the cloud bill
    power: float = 0.0  # cash: power of owned hours
    cloud: float = 0.0  # cash: the cloud bill
    missed: bool = False
    preemptions: int = 0
    kind: str = ""  # the job's kind (SimJob.kind), the same under every policy


def preemptions(seed: int, index: int, hours: float, rate: float, lost: float) -> int:
    """Preemptions of a spot run of `hours` (each adds `lost` hours of redone work)."""
    if rate <= 0:
        return 0
    rng = random.Random(seed * 1_000_003 + index)
    k, at = 0, rng.expovariate(rate)
    while at < hours + k * lost and k < 1000:
        k += 1
        at += rng.expovariate(rate)
    return k


@dataclass
class Simulation:
    """One trace, one scenario, shared by every policy run."""

    trace: Trace
    jobs: list[SimJob]
    offers: tuple[Offer, ...]
    settings: Settings  # the policy's (hybrid, the scenario's pools and clouds)
    seed: int = 1
    spot_rate: float = SPOT_PREEMPTIONS_PER_H
    ownership_usd: float = 0.0  # owned GPUs' purchase spread over the period's days
    first_report_h: float = FIRST_REPORT_H  # 0: runs report only as they end
    index: OfferIndex = field(init=False)  # of `offers`, built once for every policy

    def __post_init__(self):
        self.index = OfferIndex(self.offers)
        self.scheduled = sorted((sj.ask for sj in self.jobs if sj.ask.trace_kind == "steady"),
                                key=lambda a: a.arrival_h)

    @property
    def span_h(self) -> float:
        return self.trace.days * 24.0

    def hours(self, sj: SimJob, gpu: Optional[str], used: float) -> float:
        """True run hours of a job on `used` x `gpu`: its work scaled by relative speed."""
        return true_hours(sj.job, gpu, used, self.settings.gpu_speeds)

    def recorded(self, sj: SimJob, choice: Choice, run_h: Optional[float]) -> PastRun:
        """The run as the runner records it: its wall time (restarts included), device,
        throughput (samples per second, in proportion to the job's true speed there) and
        the share of a step it waited for data (`jobs.data_share`). `run_h` None: the run
        still running, as its first report left it (no wall time yet)."""
        pure_h = self.hours(sj, choice.offer.gpu, choice.used)
        return PastRun(fingerprint=sj.job.fingerprint,
                       status="SUCCEEDED" if run_h is not None else "RUNNING",
                       created_at=self.trace.start + sj.job.arrival_h * 3600.0,
                       duration_s=None if run_h is None else run_h * 3600.0,
                       target=choice.offer.target,
                       gpu=choice.offer.gpu, gpu_count=choice.used,
                       samples_per_sec=REF_THROUGHPUT * sj.job.wall_hours / pure_h,
                       data_share=data_share(sj.job, choice.offer.gpu),
                       estimate_hours=sj.ask.estimate_h,
                       estimate_gpu=None if sj.ask.estimate_h is None else sj.job.gpu)

    def run(self, name: str, policy: Policy) -> PolicyRun:
        pools = [Pool(o, float(o.count)) for o in self.offers if o.target == ONPREM]
        view = View(self.settings, self.index, self.trace.start, pools, self.scheduled)
        busy: list[tuple[float, float, float]] = []  # (start_h, finish_h, used) on owned GPUs
        startup_h = self.settings.cloud_startup_minutes / 60.0
        out: list[Outcome] = [Outcome(sj.job.index, None, kind=sj.kind) for sj in self.jobs]
        heap: list = []
        seq = 0
        for sj in self.jobs:
            heap.append((sj.job.arrival_h, 1, seq, sj, None))
            seq += 1
        heapq.heapify(heap)

        reports: dict[int, PastRun] = {}  # job index -> its running run's first report

        def finish_at(t: float, sj: SimJob, choice: Choice, pool: Optional[Pool], run_h: float):
            nonlocal seq
            heapq.heappush(heap, (t, 0, seq, sj, (choice, pool, run_h)))
            seq += 1
            first = self.first_report_h
            if 0 < first < run_h:  # it trains from t - run_h: its first report, then
                heapq.heappush(heap, (t - run_h + first, 3, seq, sj, choice))
                seq += 1

        def start_owned(t: float, pool: Pool, sj: SimJob, choice: Choice):
            h = self.hours(sj, choice.offer.gpu, choice.used)
            pool.free -= choice.used
            pool.running[sj.job.index] = (choice.used, t, choice.est_hours, choice.spread)
            busy.append((t, t + h, choice.used))
            o = out[sj.job.index]
            o.start_h, o.finish_h, o.wait_h = t, t + h, t - sj.job.arrival_h
            o.cost, o.power = owned_cost(choice.offer, h, choice.used)
            finish_at(t + h, sj, choice, pool, h)

        while heap:
            t, what, _, sj, done = heapq.heappop(heap)
            view.now_h = t
            if what == 3:  # a running run's first report: what it measured so far
                reports[sj.job.index] = self.recorded(sj, done, None)
                view.history.setdefault(sj.job.fingerprint, []).append(reports[sj.job.index])
                continue
            if what == 0:  # a job ended: its run joins the history, its GPUs free up
                choice, pool, run_h = done
                runs = view.history.setdefault(sj.job.fingerprint, [])
                if (report := reports.pop(sj.job.index, None)) is not None:
                    runs.remove(report)
                runs.append(self.recorded(sj, choice, run_h))
                view.finished += 1
                if choice.explores is not None:
                    view.exploring.discard(choice.explores)
                if pool is not None:
                    pool.free += choice.used
                    pool.running.pop(sj.job.index, None)
                    while pool.queue and pool.queue[0][1].used <= pool.free + 1e-9:
                        qa, qc = pool.queue.popleft()
                        start_owned(t, pool, self.jobs[qa.index], qc)
                continue
            if what == 2:  # a queued exploratory job's expected start has passed
                pool = done
                at = next((i for i, (qa, _) in enumerate(pool.queue) if qa.index == sj.job.index), None)
                if at is None:
                    continue  # it started
                del pool.queue[at]
            choice = policy(sj.ask, view)
            o = out[sj.job.index]
            if choice is None:
                continue
            o.target = choice.offer.target
            o.where = (f"{choice.offer.cloud}/{choice.offer.gpu}x{choice.used:g}"
                       f"{' spot' if choice.offer.spot else ''}" if not choice.offer.owned
                       else f"{choice.offer.target}/{choice.offer.gpu}x{choice.used:g}")
            if not choice.offer.owned:
                h = self.hours(sj, choice.offer.gpu, choice.used)
                k = (preemptions(self.seed, sj.job.index, h, self.spot_rate, LOST_WORK_H)
                     if choice.offer.spot else 0)
                run_h = h + k * (LOST_WORK_H + startup_h)
                o.start_h, o.wait_h, o.preemptions = t, t - sj.job.arrival_h + startup_h, k
                o.finish_h = t + startup_h + run_h
                o.cost = o.cloud = job_cost(choice.offer, h + k * LOST_WORK_H, choice.used,
                                            self.settings.cloud_startup_minutes * (1 + k))[0]
                finish_at(o.finish_h, sj, choice, None, run_h)
            else:
                pool = view.pool_for(choice.offer)
                if not pool.queue and pool.free >= choice.used - 1e-9:
                    start_owned(t, pool, sj, choice)
                else:
                    pool.queue.append((sj.ask, choice))
                    if choice.start_by_h is not None:  # asked again once its start is late
                        heapq.heappush(heap, (max(choice.start_by_h, t) + RECHECK_H, 2, seq, sj, pool))
                        seq += 1
        for sj, o in zip(self.jobs, out):
            if o.target is not None and o.start_h is None:  # queued behind a pool it can never fit
                o.target, o.where = None, "-"
            if o.finish_h is None:
                o.missed = sj.job.deadline_h is not None
            elif o.finish_h > sj.job.due_h + 1e-9:
                o.missed = True
        used_h = sum(max(0.0, min(e, self.span_h) - max(s, 0.0)) * u for s, e, u in busy)
        owned = sum(p.offer.count for p in pools) * self.span_h
        return PolicyRun(name, out, used_h, owned, self)


def _p95(values: list[float]) -> Optional[float]:
    """Nearest-rank 95th percentile, rounded to 3 places; None for no values."""
    if not values:
        return None
    v = sorted(values)
    return round(v[max(0, math.ceil(0.95 * len(v)) - 1)], 3)


@dataclass
class PolicyRun:
    name: str
    outcomes: list[Outcome]
    busy_gpu_h: float
    owned_gpu_h: float
    sim: Simulation

    @property
    def chargeback_total(self) -> float:
        return sum(o.cost for o in self.outcomes)

    @property
    def cash_total(self) -> float:
        return self.sim.ownership_usd + sum(o.power + o.cloud for o in self.outcomes)

    def daily_cash(self, days: int) -> list[float]:
        """USD of power and cloud by the day each job started (the last day takes any
        later ones), plus each day's share of ownership."""
        own = self.sim.ownership_usd / max(self.sim.trace.days, 1)
        out = [own if d < self.sim.trace.days else 0.0 for d in range(days)]
        for o in self.outcomes:
            if o.start_h is not None:
                out[min(days - 1, max(0, int(o.start_h // 24)))] += o.power + o.cloud
        return out

    def summary(self) -> dict:
        n = len(self.outcomes)
        startup_h = self.sim.settings.cloud_startup_minutes / 60.0
        waits = [o.wait_h for o in self.outcomes if o.wait_h is not None]
        misses = sum(o.missed for o in self.outcomes)
        by_target: dict[str, int] = {}
        cash_by: dict[str, float] = {}
        for o in self.outcomes:
            key = o.target or "unplaced"
            by_target[key] = by_target.get(key, 0) + 1
            cash_by[key] = cash_by.get(key, 0.0) + o.power + o.cloud
        return {
            "name": self.name,
            "ownership": round(self.sim.ownership_usd, 2),
            "power": round(sum(o.power for o in self.outcomes), 2),
            "cloud_spend": round(sum(o.cloud for o in self.outcomes), 2),
            "cash_total": round(self.cash_total, 2),
            "chargeback_total": round(self.chargeback_total, 2),
            "mean_wait_h": round(sum(waits) / len(waits), 3) if waits else None,
            "p95_wait_h": _p95(waits),
            "exploratory_p95_wait_h": self._p95_of("exploratory"),
            "exploratory_max_wait_h": max((o.wait_h for o in self.outcomes
                                           if o.kind == "exploratory" and o.wait_h is not None),
                                          default=None),
            "steady_p95_wait_h": self._p95_of("steady"),
            # The tail p95 hides: exploratory runs that waited past the wait goal (the start-up).
            "exploratory_over_goal": sum(o.kind == "exploratory" and o.wait_h is not None
                                         and o.wait_h > startup_h + 1e-6 for o in self.outcomes),
            "deadline_misses": misses,
            "deadline_miss_rate": round(misses / n, 4) if n else 0.0,
            "onprem_utilization": round(self.busy_gpu_h / self.owned_gpu_h, 4) if self.owned_gpu_h else None,
            "jobs_by_target": dict(sorted(by_target.items())),
            "cash_by_target": {k: round(v, 2) for k, v in sorted(cash_by.items())},
            "spot_preemptions": sum(o.preemptions for o in self.outcomes),
        }

    def _p95_of(self, kind: str) -> Optional[float]:
        return _p95([o.wait_h for o in self.outcomes if o.kind == kind and o.wait_h is not None])
