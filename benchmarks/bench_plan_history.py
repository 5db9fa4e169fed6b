"""One plan in a team's store of finished runs: what it costs to read what it learns from.

    .venv/bin/python benchmarks/bench_plan_history.py [--runs N] [--repeat N]

A plan (`orch plan`, `orch submit`, each job `orch serve` places) learns from every run of
its job and the team's newest 2,000 successful runs of the last 90 days
(service/planning.py). Each run's metrics hold its device telemetry, up to 240 points a
worker (jobs/telemetry.py). The store is filled with `--runs` such runs (two workers' full
series each, 50 job families), then one job is planned `--repeat` times two ways in the
same process: as planning reads its history now (`learning_runs`: the few metrics it reads,
noted beside each row's whole) and as it did before (every row read whole, as `list` and
`runs_for_fingerprint` give it), with the same PastRuns out of both.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _common import load_avg, log, print_table

from orchestrator.decision.models import PastRun
from orchestrator.service import planning
from orchestrator.service.fingerprint import fingerprint
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from orchestrator.store import open_store

JOB = "name: j\nrun: python train.py\nresources: {accelerators: A100:1}\nestimate: {hours: 1}\n"


def _metrics(i: int) -> dict:
    series = [{"t": 30.0 * k, "util": 71.3, "mem_gb": 9.41, "power_w": 301.2, "n": 6} for k in range(240)]
    return {"epoch": 8, "epochs": 8, "loss": 0.18, "accuracy": 0.96, "samples_per_sec": 4000.0 + i,
            "wall_s": 1800.0 + i, "data_fraction": 0.31, "phases": {"training": 1790.0},
            "run_settings": {"gpu_name": "NVIDIA A100-SXM4-40GB", "world_size": 2, "precision": "bf16"},
            "telemetry": {"summary": {"source": "nvml", "workers": 2, "mean_util": 71.3},
                          "workers": {str(w): {"summary": {"samples": 720}, "series": series}
                                      for w in range(2)}},
            "verdict": {"kind": "compute-bound", "reasons": ["the GPUs are busy 71% of the time"]}}


def _fill(settings: Settings, n: int) -> None:
    store = open_store(settings)
    try:
        for i in range(n):
            rec = store.create_job(name=f"job-{i % 50}", spec={"run": "python train.py"}, kind="steady",
                                   target="onprem", fingerprint=f"fp-{i % 50}", owner="ann",
                                   decision={"choice": {"target": "onprem", "gpu": "A100", "count": 2}})
            store.set_status(rec.id, "RUNNING", "started")
            store.set_status(rec.id, "SUCCEEDED", "done", metrics=_metrics(i))
    finally:
        store.close()


def _whole(store, fp: str, now: float) -> list:
    """The history as planning read it before: each row whole."""
    mine = [PastRun.from_row(r) for r in store.runs_for_fingerprint(fp)]
    team = [PastRun.from_row(r) for r in store.list(planning.TEAM_RUNS, ("SUCCEEDED",),
                                                    now - planning.TEAM_DAYS * 86400)
            if r.fingerprint and r.fingerprint != fp]
    return mine + team


def _timed(fn, repeat: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000, help="finished runs in the store")
    ap.add_argument("--repeat", type=int, default=5, help="plans timed each way; the median counts")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="orch-bph-"))
    try:
        settings = Settings(home=home)
        log(f"filling a store with {args.runs:,} runs (load average {load_avg():.2f})")
        _fill(settings, args.runs)
        size = (home / "orch.db").stat().st_size
        spec = load_spec_text(JOB, "j.yaml")
        fp, _ = fingerprint(spec)
        store = open_store(settings)
        now = time.time()
        try:
            lean = planning._history(store, fp, now)
            assert lean == _whole(store, fp, now), "the two reads gave different histories"
            read_now = _timed(lambda: planning._history(store, fp, now), args.repeat)
            read_before = _timed(lambda: _whole(store, fp, now), args.repeat)
        finally:
            store.close()
        plan_now = _timed(lambda: planning.plan(spec, settings, fingerprint=fp), args.repeat)
        log(f"load average {load_avg():.2f} at the end")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    rows = [("read the history (wall)", f"{read_now[0]:.3f} s", f"{read_before[0]:.3f} s"),
            ("read the history (CPU)", f"{read_now[1]:.3f} s", f"{read_before[1]:.3f} s"),
            ("whole plan (wall, CPU)", f"{plan_now[0]:.3f} s, {plan_now[1]:.3f} s",
             f"{plan_now[0] - read_now[0] + read_before[0]:.3f} s (its read swapped)"),
            ("past runs learned from", f"{len(lean):,}", f"{len(lean):,}")]
    print_table(f"one plan beside {args.runs:,} finished runs ({size / 2**20:.0f} MiB store), "
                f"median of {args.repeat}", ["figure", "now (learning_runs)", "before (rows whole)"], rows)
    print(json.dumps({"runs": args.runs, "read_now_s": round(read_now[0], 4),
                      "read_before_s": round(read_before[0], 4),
                      "speedup": round(read_before[0] / read_now[0], 1)}))


if __name__ == "__main__":
    main()
