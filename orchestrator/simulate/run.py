"""Run every policy and the lower bound over one trace, and say how orch did against the goals."""

from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

from orchestrator.simulate.engine import SPOT_PREEMPTIONS_PER_H, Simulation
from orchestrator.simulate.jobs import build_jobs
from orchestrator.simulate.policies import HYPERSCALERS, POLICIES
from orchestrator.simulate.scenario import Scenario, policy_settings

GOAL_RATIO, GOAL_MISS_RATE = 1.15, 0.01


def simulate(trace, scenario: Scenario, settings, *, seed: int = 1,
             spot_rate: float = SPOT_PREEMPTIONS_PER_H, policies: Optional[Sequence[str]] = None,
             progress: Callable[[str], None] = lambda msg: None) -> dict:
    """The result as `orch simulate --json` prints it (money in USD; `currency` and
    `currency_rate` say how to show it)."""
    started = time.perf_counter()
    s = policy_settings(settings, scenario)
    jobs = build_jobs(trace, scenario.offers, s)
    sim = Simulation(trace=trace, jobs=jobs, offers=scenario.offers, settings=s, seed=seed,
                     spot_rate=spot_rate)
    names = list(policies or POLICIES)
    notes = []
    if "on-demand" in names and not any(c in HYPERSCALERS for c in scenario.clouds):
        names.remove("on-demand")
        notes.append("on-demand left out: no hyperscaler (aws, gcp, azure) among the clouds")
    runs = []
    for name in names:
        t0 = time.perf_counter()
        runs.append(sim.run(name, POLICIES[name]))
        progress(f"{name}: {len(jobs)} jobs in {time.perf_counter() - t0:.2f} s")
    end_h = max([sim.span_h] + [o.finish_h for r in runs for o in r.outcomes if o.finish_h is not None])
    t0 = time.perf_counter()
    from orchestrator.simulate.oracle import lower_bound

    oracle = lower_bound(sim, end_h)
    progress(f"oracle: linear program solved in {time.perf_counter() - t0:.2f} s")
    days = max(trace.days, int(end_h // 24) + 1)
    rows = []
    for r in runs:
        rows.append({**r.summary(), "daily_cost": [round(c, 2) for c in r.daily_cost(days)]})
    rows.append({**oracle.summary(len(jobs)),
                 "daily_cost": [round(c, 2) for c in oracle.daily_cost(jobs, days)]})
    rate = settings.currency_rate
    for row in rows:
        row["total_cost_in_currency"] = round(row["total_cost"] * rate, 2)
    return {"trace": trace.source, "jobs": len(jobs), "days": trace.days, "seed": seed,
            "scenario": scenario.describe(settings.currency, rate),
            "currency": settings.currency, "currency_rate": rate,
            "spot_preemptions_per_hour": spot_rate, "policies": rows,
            "checks": checks(rows), "notes": notes,
            "wall_s": round(time.perf_counter() - started, 2)}


def checks(rows: list[dict]) -> dict:
    """The issue's goals on this trace: orch within 15 % of the lower bound, cheaper
    than every baseline, at most 1 % of its jobs late."""
    by = {r["name"]: r for r in rows}
    if "orch" not in by:
        return {}
    orch, oracle = by["orch"], by.get("oracle")
    ratio = orch["total_cost"] / oracle["total_cost"] if oracle and oracle["total_cost"] > 0 else None
    others = [r for r in rows if r["name"] not in ("orch", "oracle")]
    cheaper = [r["name"] for r in others if r["total_cost"] <= orch["total_cost"]]
    return {"orch_over_oracle": None if ratio is None else round(ratio, 4),
            "ratio_goal": GOAL_RATIO, "ratio_met": ratio is not None and ratio <= GOAL_RATIO,
            "cheaper_than_every_baseline": not cheaper, "baselines_not_beaten": cheaper,
            "orch_miss_rate": orch["deadline_miss_rate"], "miss_goal": GOAL_MISS_RATE,
            "miss_met": orch["deadline_miss_rate"] <= GOAL_MISS_RATE}
