"""The offline lower bound of the team's cash with hindsight: a linear program over owned
capacity, deadlines and waits.

Variables, for every job j and every owned pool p it fits and every hour b inside its
window: y[j,p,b], the GPU-hours of j's work that p does in hour b; and z[j], the
fraction of j that goes to its cheapest cloud option. Constraints: each job is done
once (sum_p,b y[j,p,b] / G[j,p] + z[j] = 1, G[j,p] = its GPU-hours on p); a pool holds at
most its GPUs in any hour (sum_j y[j,p,b] <= count_p); a job uses at most its own GPUs
in an hour (y[j,p,b] <= gpus_j x the part of hour b inside its window). A job's window
on a pool runs from its arrival to its deadline; an exploratory job's also ends by its
arrival + the cloud's start-up + its run hours there: a schedule that makes exploratory
work queue for owned GPUs longer than renting would take is not a cheaper way to do the
same job. Cash: y at the pool's power per GPU-hour (ownership is the same under every
schedule and is added after), z at the cheapest cloud cost per job over every offer the
job fits (spot only for a job that checkpoints), one start-up, no preemption.

Why it is a lower bound of the cash of every schedule that meets every deadline, keeps
unsaved runs off spot and starts exploratory work within the cloud's start-up: such a
schedule gives a feasible point (its owned runs' GPU-hours hour by hour, and z = 1 for
its cloud jobs), whose objective is its power exactly plus, for each cloud job, no more
than what that job paid. The program's minimum is at most that. Jobs without a deadline
may use owned GPUs until `end_h`, the last moment any simulated policy still ran
something; a job no cloud offer fits may also be charged its owned power with no
capacity, as if it ran after `end_h`, so the program stays feasible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from orchestrator.decision.cost import job_cost
from orchestrator.simulate.jobs import owned_cost

if TYPE_CHECKING:
    from orchestrator.simulate.engine import Simulation


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

    @property
    def cash_total(self) -> float:
        return self.ownership + self.power + self.cloud_spend

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
                "steady_p95_wait_h": None,
                "deadline_misses": 0, "deadline_miss_rate": 0.0,
                "onprem_utilization": (round(self.busy_gpu_h / self.owned_gpu_h, 4)
                                       if self.owned_gpu_h else None),
                "jobs_by_target": {"onprem": round(owned, 2), "cloud": round(n_jobs - owned, 2)},
                "lower_bound": True, "solver": self.status}


def lower_bound(sim: Simulation, end_h: float) -> OracleResult:
    """Solve the relaxation with HiGHS (scipy.optimize.linprog)."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    pools = [o for o in sim.offers if o.target == "onprem"]
    pool_ix = {p: i for i, p in enumerate(pools)}
    startup = sim.settings.cloud_startup_minutes
    full_of: list[float] = []  # per variable: USD per unit under the per-use chargeback
    n_b = max([1, math.ceil(end_h)] + [math.ceil(sj.job.due_h) for sj in sim.jobs
                                          if math.isfinite(sj.job.due_h)])
    cost: list[float] = []  # per variable: cash, USD per unit
    lo: list[float] = []
    hi: list[Optional[float]] = []  # None: unbounded
    eq_r: list[int] = []  # the equality rows (one per job), as (row, column, value)
    eq_c: list[int] = []
    eq_v: list[float] = []
    ub_r: list[int] = []  # the capacity rows (one per pool and hour), as (row, column); value 1
    ub_c: list[int] = []
    per_var: list[tuple[int, float, int, float]] = []  # (job, USD per unit, bucket, fraction per unit)
    for j, sj in enumerate(sim.jobs):
        a = sj.job.arrival_h
        cloud = min((job_cost(o, sim.hours(sj, o.gpu, u), u, startup)[0]
                     for o, u in sj.candidates
                     if o.target == "cloud" and (sj.job.checkpoints or not o.spot)), default=math.inf)
        end = sj.job.due_h if math.isfinite(cloud) and math.isfinite(sj.job.due_h) else end_h
        owned_costs: list[float] = []
        for o, u in sj.candidates:
            if o.target != "onprem":
                continue
            h = sim.hours(sj, o.gpu, u)
            full, c = owned_cost(o, h, u)
            owned_costs.append(c)
            g = h * u
            stop = min(end, a + startup / 60.0 + h) if sj.kind == "exploratory" else end
            for b in range(int(a), min(n_b, math.ceil(stop))):
                overlap = min(b + 1.0, stop) - max(float(b), a)
                if overlap <= 1e-9:
                    continue
                v = len(cost)
                cost.append(c / g)
                full_of.append(full / g)
                lo.append(0.0)
                hi.append(u * overlap)
                eq_r.append(j)
                eq_c.append(v)
                eq_v.append(1.0 / g)
                ub_r.append(pool_ix[o] * n_b + b)
                ub_c.append(v)
                per_var.append((j, c / g, b, 1.0 / g))
        if not math.isfinite(cloud):
            cloud = min(owned_costs, default=math.inf)  # run late on owned GPUs
        if not math.isfinite(cloud):
            cloud = 0.0  # nothing fits this job anywhere: every policy leaves it unplaced
        v = len(cost)
        cost.append(cloud)
        full_of.append(cloud)
        lo.append(0.0)
        hi.append(None)
        eq_r.append(j)
        eq_c.append(v)
        eq_v.append(1.0)
        per_var.append((j, cloud, -1, 1.0))
    n_v, n_j = len(cost), len(sim.jobs)
    a_eq = coo_matrix((eq_v, (eq_r, eq_c)), shape=(n_j, n_v)).tocsr()
    a_ub = coo_matrix((np.ones(len(ub_r)), (ub_r, ub_c)), shape=(max(1, len(pools)) * n_b, n_v)).tocsr()
    b_ub = np.repeat([float(p.count) for p in pools] or [0.0], n_b)
    res = linprog(np.array(cost), A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.ones(n_j),
                  bounds=list(zip(lo, hi)), method="highs")
    if res.status != 0:
        raise RuntimeError(f"the lower-bound program did not solve: {res.message}")
    per_job, owned = [0.0] * n_j, [0.0] * n_j
    busy = power = cloud_spend = chargeback = 0.0
    for (j, unit, b, frac), full, x in zip(per_var, full_of, res.x.tolist()):
        per_job[j] += unit * x
        chargeback += full * x
        if b >= 0:
            owned[j] += frac * x
            power += unit * x
            if b < sim.span_h:
                busy += x
        else:
            cloud_spend += unit * x
    owned_gpu_h = sum(p.count for p in pools) * sim.span_h
    return OracleResult(power=power, cloud_spend=cloud_spend, ownership=sim.ownership_usd,
                        chargeback=chargeback, job_cash=per_job, owned_fraction=owned,
                        busy_gpu_h=busy, owned_gpu_h=owned_gpu_h, status=res.message)
