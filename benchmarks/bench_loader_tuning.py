"""Loader tuning on a job made input-bound on purpose: `loader_workers: auto` against 0.

    .venv/bin/python benchmarks/bench_loader_tuning.py [--slow-data-ms 1.0] [--workers 2]
        [--epochs 4] [--multiplier 2]

The built-in `image-classification` job with `slow_data_ms` (each sample sleeps that long
in the dataset's __getitem__, standing for decoding or augmentation) runs twice through
`orch submit`: once with `data.loader_workers: 0` (every sample is loaded in the training
process) and once with `auto` (orch times a few batches with 0, 2 and 4 loader processes
and keeps the fastest). Prints each run's steady-state samples/s (median of the epochs after
the first), the per-step time breakdown, the loader workers chosen, the speed-up, and
orch's verdict (kind and advice) before and after.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OrchHome, fmt, job_yaml, load_avg, log, print_table, steady  # noqa: E402


def summarize(run) -> dict:
    reports = run.reports()
    m = run.metrics
    first, last = run.first_t("progress"), run.last_t("report")
    tuned = run.of("loader_tuned")
    return {
        "samples_per_sec": steady([r.get("samples_per_sec") for r in reports]),
        "per_epoch": [r.get("samples_per_sec") for r in reports],
        "epoch_s": steady([r.get("epoch_s") for r in reports]),
        "data_ms": _ms(m.get("time_data_s")),
        "copy_ms": _ms(m.get("time_copy_s")),
        "compute_ms": _ms(m.get("time_compute_s")),
        "data_fraction": m.get("data_fraction"),
        "loader_workers": m.get("loader_workers"),
        "tuning": (tuned[0].get("seconds_per_batch") if tuned else None)
                  or (m.get("run_settings") or {}).get("loader_tuning"),
        "verdict": m.get("verdict") or {},
        "training_s": (last - first) if first and last else None,
        "wall_s": run.returned - run.invoked,
    }


def _ms(v):
    return None if v is None else v * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slow-data-ms", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=2, help="data-parallel training workers")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--multiplier", type=int, default=2, help="dataset_multiplier")
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    log(f"load average {load_avg():.2f} on {os.cpu_count()} cores")

    config = {"epochs": args.epochs, "batch_size": args.batch_size, "lr": 2e-3,
              "dataset_multiplier": args.multiplier, "seed": 0, "slow_data_ms": args.slow_data_ms}
    results = {}
    with OrchHome(prefix="obl") as home:
        for label, lw in (("loader_workers: 0", 0), ("loader_workers: auto", "auto")):
            log(f"slow job with {label}")
            run = home.submit(f"slow-{lw}", job_yaml(f"bench-slow-{lw}", config,
                                                     num_workers=args.workers, precision="bf16",
                                                     loader_workers=lw, pin_memory="auto"))
            if not run.ok:
                raise SystemExit(run.fail_text())
            results[label] = summarize(run)

    rows = []
    for label, r in results.items():
        rows.append((label, fmt(r["loader_workers"], "d") if isinstance(r["loader_workers"], int)
                     else str(r["loader_workers"]),
                     " ".join(f"{x:,.0f}" for x in r["per_epoch"] if x is not None),
                     fmt(r["samples_per_sec"], ",.0f"), fmt(r["epoch_s"], ".2f"),
                     fmt(r["data_ms"], ".2f"), fmt(r["copy_ms"], ".2f"), fmt(r["compute_ms"], ".2f"),
                     fmt(r["data_fraction"], ".2f"), fmt(r["training_s"], ".1f"),
                     fmt(r["wall_s"], ".1f"), r["verdict"].get("kind", "n/a")))
    print_table(f"loader tuning: slow_data_ms {args.slow_data_ms:g}, {args.workers} workers, "
                f"batch {args.batch_size}, dataset_multiplier {args.multiplier}, {args.epochs} epochs, bf16",
                ["run", "loader workers", "samples/s per epoch", "steady samples/s", "epoch s",
                 "data ms/step", "copy ms/step", "compute ms/step", "data share",
                 "training s", "submit wall s", "verdict"], rows)
    before, after = results["loader_workers: 0"], results["loader_workers: auto"]
    if after["tuning"]:
        print("auto tuning, seconds per batch by loader workers tried: "
              + ", ".join(f"{k}: {v * 1000:.1f} ms" for k, v in after["tuning"].items())
              + f"  -> chose {after['loader_workers']}")
    for label, r in (("before (loader_workers 0)", before), ("after (loader_workers auto)", after)):
        v = r["verdict"]
        print(f"verdict {label}: {v.get('kind', 'n/a')}")
        for reason in v.get("reasons", []):
            print(f"    because: {reason}")
        for advice in v.get("advice", []):
            print(f"    advice:  {advice}")
    speedup = (after["samples_per_sec"] / before["samples_per_sec"]
               if after["samples_per_sec"] and before["samples_per_sec"] else None)
    wall = before["wall_s"] / after["wall_s"] if after["wall_s"] else None
    print(f"SPEED-UP auto / 0 loader workers, steady samples/s: {fmt(speedup, '.2f')}x "
          f"(chosen loader workers: {after['loader_workers']}); whole `orch submit` wall "
          f"clock: {fmt(wall, '.2f')}x")
    log(f"load average {load_avg():.2f} at the end")


if __name__ == "__main__":
    main()
