"""The offline lower bound of the team's cash with hindsight: a linear program over owned
capacity, deadlines and waits, and beside it a whole-job MIP (bound_mip.py).

Variables, for every job j and every owned pool p it fits and every time segment s
inside its window: y[j,p,s], the GPU-hours of j's work that p does in s; and z[j], the
fraction of j that goes to its cheapest cloud option. Constraints: each job is done
once (sum_p,s y[j,p,s] / G[j,p] + z[j] = 1, G[j,p] = its GPU-hours on p); a pool holds at
most its GPUs over a segment (sum_j y[j,p,s] <= count_p x |s|); a job uses at most its own
GPUs there (y[j,p,s] <= gpus_j x the part of s inside its window, taken exactly). The
segments are buckets of `bucket_minutes` (6 by default; 0: cut only at window edges),
merged where no window edge falls (bound_model.py proves both the bucket rows and the
merging valid). A job's window on a pool runs from its arrival to its deadline; an
exploratory job's also ends by its arrival + the cloud's start-up + its run hours there:
a schedule that makes exploratory work queue for owned GPUs longer than renting would
take is not a cheaper way to do the same job. Cash: y at the pool's power per GPU-hour
(ownership is the same under every schedule and is added after), z at the cheapest
cloud cost per job over every offer the job fits (spot only for a job that
checkpoints), one start-up, no preemption.

Why it is a lower bound of the cash of every schedule that meets every deadline, keeps
unsaved runs off spot, starts exploratory work within the cloud's start-up and runs each
owned job in one piece, as every simulated policy does (bound_model.py's rows): such a
schedule gives a feasible point (its owned runs' GPU-hours segment by segment, and z = 1
for its cloud jobs), whose objective is its power exactly plus, for each cloud job, no
more than what that job paid. The program's minimum is at most that. Jobs without a
deadline may use owned GPUs until `end_h`, the last moment any simulated policy still
ran something; a job no cloud offer fits may also be charged its owned power with no
capacity, as if it ran after `end_h`, so the program stays feasible.

Counting capacity per clock hour (bucket_minutes=60, as before) lets twelve one-hour
runs arriving at 10:50 on two GPUs use the whole 10:00-11:00 hour's two GPU-hours;
6-minute buckets give them the 10:48-10:54 bucket's 0.2 GPU-hours, then 0.2 per bucket.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from orchestrator.base.targets import CLOUD, ONPREM

if TYPE_CHECKING:
    from orchestrator.simulate.bound_mip import WholeJobBound
    from orchestrator.simulate.engine import Simulation

BUCKET_MINUTES = 6.0  # owned capacity is counted per bucket of this length
# The whole-job MIP stops at a number of branch-and-bound nodes, a limit that does not move
# with the machine's load; its wall-clock limit is only a safety cap.
MIP_NODES = 300
MIP_SECONDS = 600.0


@dataclass
class OracleResult:
    power: float  # USD of owned GPUs' power
    cloud_spend: float
    ownership: float
    chargeback: float  # the same schedule under the per-use accounting
    job_cash: list[float]  # USD per job (power + cloud), in trace order
    owned_fraction: list[float]  # of each job's work done on owned GPUs
    busy_gpu_h: float  # owned GPU-hours used inside the simulated span
    owned_gpu_h: float
    status: str
    bucket_minutes: float = BUCKET_MINUTES
    lp_seconds: float = 0.0
    segments: int = 0  # time segments after merging the buckets no window edge falls in
    variables: int = 0
    whole_job: Optional[WholeJobBound] = None  # None: the MIP was not run

    @property
    def cash_total(self) -> float:
        return self.ownership + self.power + self.cloud_spend

    @property
    def power_cloud(self) -> float:
        """The LP's bound on what placement controls (power + cloud)."""
        return self.power + self.cloud_spend

    @property
    def best_power_cloud(self) -> float:
        """The best proven bound on power + cloud: the MIP's dual bound when it has one
        above the LP's (it bounds whole-job schedules, as every policy runs)."""
        dual = self.whole_job.dual_bound if self.whole_job else None
        return self.power_cloud if dual is None else max(self.power_cloud, dual)

    def bound(self) -> dict:
        """The bound's figures for `orch simulate --json`."""
        w = self.whole_job
        return {"lp_power_cloud": round(self.power_cloud, 2), "lp_cash_total": round(self.cash_total, 2),
                "bucket_minutes": self.bucket_minutes, "lp_seconds": round(self.lp_seconds, 2),
                "segments": self.segments, "variables": self.variables,
                "whole_job": None if w is None else w.summary(),
                "best_power_cloud": round(self.best_power_cloud, 2),
                "best_cash_total": round(self.ownership + self.best_power_cloud, 2)}

    def daily_cash(self, jobs, days: int, trace_days: int) -> list[float]:
        own = self.ownership / max(trace_days, 1)
        out = [own if d < trace_days else 0.0 for d in range(days)]
        for sj, c in zip(jobs, self.job_cash):
            out[min(days - 1, max(0, int(sj.job.arrival_h // 24)))] += c
        return out

    def summary(self, n_jobs: int) -> dict:
        owned = float(sum(self.owned_fraction))
        return {"name": "oracle", "ownership": round(self.ownership, 2),
                "power": round(self.power, 2), "cloud_spend": round(self.cloud_spend, 2),
                "cash_total": round(self.cash_total, 2),
                "chargeback_total": round(self.chargeback, 2), "mean_wait_h": None,
                "p95_wait_h": None, "exploratory_p95_wait_h": None, "exploratory_max_wait_h": None,
                "steady_p95_wait_h": None, "exploratory_over_goal": None,
                "deadline_misses": 0, "deadline_miss_rate": 0.0,
                "onprem_utilization": (round(self.busy_gpu_h / self.owned_gpu_h, 4)
                                       if self.owned_gpu_h else None),
                "jobs_by_target": {ONPREM: round(owned, 2), CLOUD: round(n_jobs - owned, 2)},
                "lower_bound": True, "solver": self.status, "bound": self.bound()}


def bound_line(bound: dict) -> str:
    """One line for `orch simulate`'s text output, from an oracle row's `bound` (USD)."""
    w = bound.get("whole_job")
    lp = (f"bound on power + cloud: LP {bound['lp_power_cloud']:,.2f} USD "
          f"({bound['bucket_minutes']:g}-minute buckets, {bound['lp_seconds']:.2f} s)")
    if w is None:
        return lp + "; whole-job MIP not run"
    if w["dual_bound"] is None:
        return lp + f"; whole-job MIP: no bound within its {_limit(w)}"
    tail = f"stopped at its {_limit(w)}" if w["hit_limit"] else "finished"
    inc = "" if w["incumbent"] is None else f", best whole-job point {w['incumbent']:,.2f}"
    gap = "" if w["gap"] is None else f", gap {100 * w['gap']:.1f} %"
    return (lp + f"; whole jobs at least {w['dual_bound']:,.2f} USD{inc}{gap} "
            f"({w['seconds']:.1f} s, {tail})")


def _limit(w: dict) -> str:
    """The MIP's limit in words: its node limit, unless only the time limit can have stopped it."""
    nodes = w.get("node_limit")
    if nodes is None or (w.get("nodes") is not None and w["nodes"] < nodes):
        return f"{w['time_limit_s']:g} s time limit"
    return f"{nodes:,} node limit"


def lower_bound(sim: Simulation, end_h: float, *, bucket_minutes: float = BUCKET_MINUTES,
                mip_seconds: Optional[float] = MIP_SECONDS, one_piece: bool = True,
                mip_nodes: Optional[int] = MIP_NODES) -> OracleResult:
    """Solve the relaxation with HiGHS (scipy.optimize.linprog), then the whole-job MIP for at
    most `mip_nodes` branch-and-bound nodes (the deterministic limit; None: none) and
    `mip_seconds` (a safety cap; None: skip the MIP)."""
    import numpy as np
    from scipy.optimize import linprog

    from orchestrator.simulate.bound_mip import whole_job_bound
    from orchestrator.simulate.bound_model import build

    t0 = time.perf_counter()
    prog = build(sim, end_h, bucket_minutes / 60.0, one_piece)
    res = linprog(prog.cost, A_ub=prog.a_ub, b_ub=prog.b_ub, A_eq=prog.a_eq, b_eq=np.ones(prog.n_jobs),
                  bounds=np.stack([np.zeros(prog.n_vars), prog.hi], axis=1), method="highs")
    if res.status != 0:
        raise RuntimeError(f"the lower-bound program did not solve: {res.message}")
    lp_seconds = time.perf_counter() - t0
    x = res.x
    owned = prog.pool >= 0
    power = float(prog.cost[owned] @ x[owned])
    cloud_spend = float(prog.cost[~owned] @ x[~owned])
    per_job = np.bincount(prog.job, weights=prog.cost * x, minlength=prog.n_jobs)
    owned_frac = np.bincount(prog.job[owned], weights=(prog.per_job * x)[owned], minlength=prog.n_jobs)
    busy = float((x * prog.in_span)[owned].sum())
    owned_gpu_h = sum(p.count for p in sim.offers if p.target == ONPREM) * sim.span_h
    mip = None if mip_seconds is None else whole_job_bound(prog, mip_seconds, mip_nodes)
    return OracleResult(power=power, cloud_spend=cloud_spend, ownership=sim.ownership_usd,
                        chargeback=float(prog.full @ x), job_cash=per_job.tolist(),
                        owned_fraction=owned_frac.tolist(), busy_gpu_h=busy, owned_gpu_h=owned_gpu_h,
                        status=res.message, bucket_minutes=bucket_minutes, lp_seconds=lp_seconds,
                        segments=prog.n_segments, variables=prog.n_vars, whole_job=mip)
