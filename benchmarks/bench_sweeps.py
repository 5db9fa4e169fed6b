"""Sweeps placed together against the same runs submitted one by one (issue 51).

    PYTHONPATH=. python benchmarks/bench_sweeps.py [--seeds 1,2,3] [--days 30]

The generated families with sweeps (bench_families' "50-run sweeps", and the usual 4-12
run sweeps on 4 A100s): every sweep's runs arrive together, once in the file's order (a
shell loop of `orch submit`, each run placed as it comes) and once longest first by what
the job file says of each run (`orch submit` of a `sweep:` file ranks its runs by their
estimates, never by their true hours). orch's policy places both; the table prints its
cash and power + cloud for each, and online-truth's beside (the greedy told the truth).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_families import family  # noqa: E402
from orchestrator.decision.sweeps import longest_first  # noqa: E402
from orchestrator.settings import load_settings  # noqa: E402
from orchestrator.simulate.run import simulate  # noqa: E402

SHAPES = (("4 A100s, 50-run sweeps", "A100:4", 1.0, "50:50"),
          ("4 A100s, 4-12-run sweeps", "A100:4", 1.0, None))


def gathered(trace, ranked: bool):
    """The trace with each sweep's runs (one name, `sweep-...`, within 10 minutes) arriving
    together at its first run's time, in the file's order or longest first by estimate."""
    jobs = sorted(trace.jobs, key=lambda j: (j.arrival_h, j.index))
    out, i = [], 0
    while i < len(jobs):
        j = jobs[i]
        run = [j]
        while (j.name.startswith("sweep-") and i + len(run) < len(jobs)
               and jobs[i + len(run)].name == j.name
               and jobs[i + len(run)].arrival_h - j.arrival_h <= 10 / 60):
            run.append(jobs[i + len(run)])
        order = (longest_first([r.estimate_h if r.estimate_h is not None else 0.0 for r in run])
                 if ranked else list(range(len(run))))
        out.extend(dataclasses.replace(run[k], arrival_h=j.arrival_h) for k in order)
        i += len(run)
    out = [dataclasses.replace(job, index=n) for n, job in enumerate(out)]
    return dataclasses.replace(trace, jobs=out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--days", type=int, default=30)
    args = ap.parse_args()
    settings = load_settings()
    print("| family | seed | runs in sweeps | one by one: cash / power + cloud USD | placed "
          "together: cash / power + cloud USD | saved USD | online-truth power + cloud USD |")
    print("| --- " * 7 + "|")
    started = time.perf_counter()
    for label, owned, steady, burst in SHAPES:
        for seed in [int(s) for s in args.seeds.split(",")]:
            trace, scenario = family(owned, steady, seed, args.days, settings, burst)
            swept = sum(j.name.startswith("sweep-") for j in trace.jobs)
            got = {}
            for ranked in (False, True):
                r = simulate(gathered(trace, ranked), scenario, settings, seed=seed,
                             policies=["orch", "online-truth"], mip_seconds=0)
                by = {p["name"]: p for p in r["policies"]}
                got[ranked] = by
            a, b = got[False]["orch"], got[True]["orch"]
            online = got[True]["online-truth"]
            pc = lambda p: p["power"] + p["cloud_spend"]  # noqa: E731
            print(f"| {label} | {seed} | {swept} | {a['cash_total']:,.2f} / {pc(a):,.2f} | "
                  f"{b['cash_total']:,.2f} / {pc(b):,.2f} | {a['cash_total'] - b['cash_total']:,.2f} | "
                  f"{pc(online):,.2f} |", flush=True)
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
