"""Where orch's power + cloud exceeds the whole-job bound on one generated trace, job by job.

    PYTHONPATH=. python benchmarks/gap_to_bound.py [--owned A100:4] [--steady 1] [--seed 1]
        [--days 90] [--mip-seconds 30]

Generates a family trace as bench_families.py does (estimates off by sigma 0.5, per-job
speeds from a compute-bound share in 0-1), runs orch's policy, solves the whole-job MIP
(simulate/bound_mip.py's program, 6-minute buckets, runs in one piece) and compares the
two job by job. Exploratory runs of one fingerprint arriving within 15 minutes of the
first form a burst (a sweep). The difference is split into:
- bursts where the MIP keeps as many runs on owned GPUs as orch did: what it gains is
  *which* runs (it knows their true lengths); "which runs" is what the MIP's cost would be
  had it owned the first arrivals instead, as orch does, with the same count;
- bursts where the MIP owns more runs than orch: it freed GPUs ahead of the burst, or knew
  when runs would end;
- bursts where it owns fewer, single runs, and steady work.
The MIP's point is a relaxation (work outside each run's sure part may still split), so
the split is approximate; its total is the bound the checks use.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/x.py` puts benchmarks/ first, not the root
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from bench_families import family  # noqa: E402  (benchmarks/, beside this script)

from orchestrator.settings import load_settings  # noqa: E402
from orchestrator.simulate.bound_model import build  # noqa: E402
from orchestrator.simulate.engine import Simulation  # noqa: E402
from orchestrator.simulate.jobs import build_jobs  # noqa: E402
from orchestrator.simulate.oracle import BUCKET_MINUTES  # noqa: E402
from orchestrator.simulate.policies import POLICIES  # noqa: E402
from orchestrator.simulate.scenario import policy_settings  # noqa: E402

BURST_H = 0.25  # runs of one fingerprint within this of the burst's first arrival


def solve(prog, seconds: float) -> np.ndarray:
    """The MIP's best point (each job's cloud share 0 or 1; one owned pool here)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    cloud = prog.pool < 0
    res = milp(prog.cost, integrality=cloud.astype(int),
               bounds=Bounds(np.zeros(prog.n_vars), np.where(cloud, 1.0, prog.hi)),
               constraints=[LinearConstraint(prog.a_eq, 1, 1),
                            LinearConstraint(prog.a_ub, -np.inf, prog.b_ub)],
               options={"time_limit": seconds, "mip_rel_gap": 1e-3})
    if res.x is None:
        raise SystemExit(f"the MIP found no point: {res.message}")
    return res.x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--owned", default="A100:4")
    ap.add_argument("--steady", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--days", type=int, default=90)
    ap.add_argument("--mip-seconds", type=float, default=30.0)
    args = ap.parse_args()
    settings = load_settings()
    trace, scenario = family(args.owned, args.steady, args.seed, args.days, settings)
    s = policy_settings(settings, scenario)
    jobs = build_jobs(trace, scenario.offers, s)
    sim = Simulation(trace=trace, jobs=jobs, offers=scenario.offers, settings=s, seed=args.seed)
    run = sim.run("orch", POLICIES["orch"])
    end_h = max([sim.span_h] + [o.finish_h for o in run.outcomes if o.finish_h is not None])
    prog = build(sim, end_h, BUCKET_MINUTES / 60.0)
    x = solve(prog, args.mip_seconds)
    cloud = prog.pool < 0
    mip_cost = np.bincount(prog.job, weights=prog.cost * x, minlength=prog.n_jobs)
    mip_rents = np.bincount(prog.job[cloud], weights=x[cloud], minlength=prog.n_jobs) > 0.5
    rent_cost = np.zeros(prog.n_jobs)
    rent_cost[prog.job[cloud]] = prog.cost[cloud]
    own_cost = np.zeros(prog.n_jobs)  # its whole run on owned GPUs, at their power
    for v in np.flatnonzero(~cloud):
        own_cost[prog.job[v]] = prog.cost[v] / prog.per_job[v]
    orch_cost = [(o.power or 0.0) + (o.cloud or 0.0) for o in run.outcomes]

    bursts: dict[str, list[list]] = defaultdict(list)
    for sj in sorted(jobs, key=lambda j: j.job.arrival_h):
        if sj.kind != "exploratory":
            continue
        mine = bursts[sj.job.fingerprint]
        if mine and sj.job.arrival_h - mine[-1][0].job.arrival_h <= BURST_H:
            mine[-1].append(sj)
        else:
            mine.append([sj])
    parts: dict[str, float] = defaultdict(float)
    for groups in bursts.values():
        for g in groups:
            ix = [sj.job.index for sj in g]
            diff = sum(orch_cost[i] - mip_cost[i] for i in ix)
            if len(g) == 1:
                parts["single exploratory runs"] += diff
                continue
            owned_orch = sum(run.outcomes[i].target == "onprem" for i in ix)
            owned_mip = sum(not mip_rents[i] for i in ix)
            if owned_mip == owned_orch:
                first_k = sum(own_cost[i] if k < owned_mip else rent_cost[i] for k, i in enumerate(ix))
                parts["bursts, same count owned: which runs"] += first_k - sum(mip_cost[i] for i in ix)
                parts["bursts, same count owned: the rest"] += diff - (
                    first_k - sum(mip_cost[i] for i in ix))
            elif owned_mip > owned_orch:
                parts["bursts where the MIP owns more runs"] += diff
            else:
                parts["bursts where the MIP owns fewer runs"] += diff
    steady = [sj.job.index for sj in jobs if sj.kind != "exploratory"]
    parts["steady work"] = sum(orch_cost[i] - mip_cost[i] for i in steady)
    total_orch, total_mip = sum(orch_cost), float(mip_cost.sum())
    print(f"trace: {args.owned} owned, steady x{args.steady:g}, seed {args.seed}, "
          f"{args.days} days, {len(jobs)} jobs")
    print(f"orch power + cloud {total_orch:,.2f} USD; the MIP's whole-job point {total_mip:,.2f} "
          f"USD; difference {total_orch - total_mip:,.2f} USD")
    for what, usd in parts.items():
        print(f"  {what:<42} {usd:8.2f} USD")


if __name__ == "__main__":
    main()
