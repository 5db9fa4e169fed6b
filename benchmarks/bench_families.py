"""The generated families of issues 33 and 49: orch against online-truth, the bound and every baseline.

    PYTHONPATH=. python benchmarks/bench_families.py [--seeds 1,2,3] [--days 90] [--mip-nodes 300]
        [--mip-seconds 600] [--only WORD,WORD] [--first-report-minutes 6]

Eleven shapes of team (SHAPES: 1 and 2 owned RTX 4090s; 2, 4, 8 and 16 owned A100s; 4
with twice the steady load; faster GPUs whose true speed is far below their peak;
estimates 3x too long and 3x too short; 50-run sweeps at once), each with job files whose
estimates are off by sigma 0.5 and per-job speeds drawn from a compute-bound share, 90
days, seeds 1-3. For each trace it prints orch's cash and power + cloud (what placement
controls) beside online-truth's (the greedy told each job's truth on arrival) and the best
bound, the cheapest comparable baseline, what learning costs (orch over orch told the
truth), deadline misses (owned-first's beside) and the exploratory p95 wait; then how many
traces meet each goal of issue 49. Takes 10-15 minutes on 2 cores (`--mip-seconds 0`: the
LP bound alone, a few minutes; the goals do not depend on the bound).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/x.py` puts benchmarks/ first, not the root
    sys.path.insert(0, str(ROOT))

from orchestrator.settings import load_settings  # noqa: E402
from orchestrator.simulate.engine import FIRST_REPORT_H  # noqa: E402
from orchestrator.simulate.generate import generate, parse_shape  # noqa: E402
from orchestrator.simulate.oracle import MIP_SECONDS  # noqa: E402
from orchestrator.simulate.run import simulate  # noqa: E402
from orchestrator.simulate.scenario import load_scenario  # noqa: E402
from orchestrator.simulate.trace import format_trace, parse_trace  # noqa: E402

# (label, owned GPU:COUNT, steady multiplier, sweep runs LO:HI, compute share LO:HI,
#  estimate bias): each exercises a rule of issue 49 (cron guards by slack on small
#  consumer pools, waits behind runs that outlive short estimates, speeds far below peak,
#  sweeps of 50 runs at once).
SHAPES = (("1 RTX4090", "RTX4090:1", 1.0, None, "0:1", 1.0),
          ("2 RTX4090s", "RTX4090:2", 1.0, None, "0:1", 1.0),
          ("2 A100s", "A100:2", 1.0, None, "0:1", 1.0),
          ("4 A100s", "A100:4", 1.0, None, "0:1", 1.0),
          ("8 A100s", "A100:8", 1.0, None, "0:1", 1.0),
          ("16 A100s", "A100:16", 1.0, None, "0:1", 1.0),
          ("4 A100s, steady x2", "A100:4", 2.0, None, "0:1", 1.0),
          ("4 A100s, faster GPUs far below peak", "A100:4", 1.0, None, "0:0.15", 1.0),
          ("4 A100s, estimates 3x long", "A100:4", 1.0, None, "0:1", 3.0),
          ("4 A100s, estimates 3x short", "A100:4", 1.0, None, "0:1", 1 / 3),
          ("4 A100s, 50-run sweeps", "A100:4", 1.0, "50:50", "0:1", 1.0))
PRICE_PER_GPU = {"A100": 10_000, "RTX4090": 2_000}  # USD each owned GPU is amortized from


def family(owned: str, steady: float, seed: int, days: int, settings, burst=None,
           compute: str = "0:1", bias: float = 1.0):
    """One family trace (estimates off by sigma 0.5 times `bias`, speeds from a compute
    share in `compute`) and its scenario: the owned GPUs at PRICE_PER_GPU each, the
    settings' clouds."""
    shape = parse_shape(owned, steady, burst, 0.5, compute, bias)
    text = format_trace(generate(days, seed, shape))
    trace = parse_trace(text, f"{owned} steady x{steady:g} seed {seed}", settings.gpu_speeds)
    n = shape.owned
    return trace, load_scenario(settings, [f"{shape.gpu}:{n}:{n * PRICE_PER_GPU[shape.gpu]}"])


def run_one(shape: tuple, seed: int, days: int, mip_nodes: int, settings,
            mip_seconds: float = MIP_SECONDS, first_report_h: float = FIRST_REPORT_H) -> dict:
    _, owned, steady, burst, compute, bias = shape
    trace, scenario = family(owned, steady, seed, days, settings, burst, compute, bias)
    return simulate(trace, scenario, settings, seed=seed, beliefs="both", mip_nodes=mip_nodes,
                    mip_seconds=mip_seconds, first_report_h=first_report_h)


def row(label: str, seed: int, r: dict) -> tuple[str, dict]:
    c = r["checks"]
    by = {p["name"]: p for p in r["policies"]}
    orch, bound = by["orch"], by["oracle"]["bound"]
    comparable = [p for p in r["policies"] if p["name"] in c["comparable_baselines"]]
    best = min(comparable, key=lambda p: p["cash_total"], default=None)
    w = bound["whole_job"] or {}
    online, first = by["online-truth"], by["owned-first"]
    cheapest = "-" if best is None else f"{best['name']} {best['cash_total']:,.0f}"
    goals = {"0 deadline misses where owned-first has 0": orch["deadline_misses"] == 0
             or first["deadline_misses"] > 0,
             "cash below every comparable baseline": c["cheaper_than_every_baseline"],
             "power + cloud <= 1.05x online-truth": c["online_met"],
             "exploratory p95 wait within the goal": c["wait_met"],
             "learning cost <= 1.05x": (r["learning_cost"] or 0) <= 1.05,
             "(figure) power + cloud <= 1.15x the bound": c["power_cloud_met"]}
    line = (f"| {label} | {seed} | {r['jobs']} | {orch['cash_total']:,.0f} | "
            f"{orch['power'] + orch['cloud_spend']:,.2f} | {bound['best_power_cloud']:,.2f}"
            f"{'' if not w.get('hit_limit') else ' (MIP at its limit)'} | "
            f"{c['orch_power_cloud_over_bound']:.3f} | "
            f"{online['power'] + online['cloud_spend']:,.2f} | {c['orch_power_cloud_over_online']:.3f} | "
            f"{r['learning_cost']:.3f} | "
            f"{cheapest} | "
            f"{orch['deadline_misses']} ({first['deadline_misses']}) | "
            f"{c['orch_exploratory_p95_wait_h']:.2f} |")
    return line, goals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--days", type=int, default=90)
    ap.add_argument("--mip-nodes", type=int, default=300)
    ap.add_argument("--mip-seconds", type=float, default=MIP_SECONDS,
                    help="the MIP's safety cap; 0: the LP bound alone")
    ap.add_argument("--first-report-minutes", type=float, default=FIRST_REPORT_H * 60,
                    help="when a run's first report reaches later placements (0: as it ends)")
    ap.add_argument("--only", default="", help="families whose label contains one of these "
                    "comma-separated words")
    args = ap.parse_args()
    settings = load_settings()
    seeds = [int(s) for s in args.seeds.split(",")]
    print("| owned | seed | jobs | orch cash USD | orch power + cloud USD | best bound USD | "
          "ratio to it | online-truth power + cloud USD | ratio (goal 1.05) | "
          "learning cost (goal 1.05) | cheapest comparable baseline, cash USD "
          "| misses (owned-first) | expl. p95 wait h |")
    print("| --- " * 13 + "|")
    met: dict[str, int] = {}
    started, n = time.perf_counter(), 0
    only = [x.strip() for x in args.only.split(",")] if args.only else None
    for shape in SHAPES:
        label = shape[0]
        if only and not any(o in label for o in only):
            continue
        for seed in seeds:
            t0 = time.perf_counter()
            r = run_one(shape, seed, args.days, args.mip_nodes, settings, args.mip_seconds,
                        args.first_report_minutes / 60.0)
            line, goals = row(label, seed, r)
            print(line, flush=True)
            print(f"  {label} seed {seed}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            for k, ok in goals.items():
                met[k] = met.get(k, 0) + bool(ok)
            n += 1
    print()
    for k, v in met.items():
        print(f"{k}: {v} of {n} traces")
    print(f"{n} traces in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
