"""Generate the 90-day trace, simulate every policy on it, print the table and the wall time.

    PYTHONPATH=. python benchmarks/bench_simulate.py [--days 90] [--seed 1] [--onprem A100:4:40000]

The scenario is `orch simulate`'s: the settings' owned GPUs and clouds, else the default
(4 owned A100s; lambda, runpod and aws priced from examples/catalog). Reading the price
catalogs (which imports SkyPilot) is timed apart from the simulation itself.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/x.py` puts benchmarks/ first, not the root
    sys.path.insert(0, str(ROOT))

from orchestrator.cli.simulate import render  # noqa: E402
from orchestrator.settings import load_settings  # noqa: E402
from orchestrator.simulate.generate import generate  # noqa: E402
from orchestrator.simulate.run import simulate  # noqa: E402
from orchestrator.simulate.scenario import load_scenario  # noqa: E402
from orchestrator.simulate.trace import format_trace, load_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=90)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--onprem", action="append", default=[], help="GPU:COUNT:PRICE[:WATTS]")
    args = ap.parse_args()
    settings = load_settings()
    times = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"trace-{args.days}d-seed{args.seed}.csv"
        path.write_text(format_trace(generate(args.days, args.seed)))
        trace = load_trace(path, settings.gpu_speeds)
    times["generate + read the trace"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    scenario = load_scenario(settings, args.onprem)
    times["read the price catalogs"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = simulate(trace, scenario, settings, seed=args.seed,
                      progress=lambda msg: print(f"  {msg}", file=sys.stderr))
    times["simulate 5 policies + the lower bound"] = time.perf_counter() - t0
    result["wall_s"] = sum(times.values())
    result["trace"] = f"generated, {args.days} days, seed {args.seed}"
    render(result)
    print()
    for what, s in times.items():
        print(f"{what:<40} {s:6.2f} s")


if __name__ == "__main__":
    main()
