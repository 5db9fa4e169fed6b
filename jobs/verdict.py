"""What held a run back, from its measured step breakdown, and what would help.

Pure: figures in, a verdict out. It runs at the end of every run on the target and again
in orch when the record is read, so it imports nothing but the standard library (and the
pure part of jobs/precision.py).
"""

from __future__ import annotations

from typing import Optional

from .precision import advice as precision_advice

INPUT_BOUND = 0.30   # share of step time spent waiting for data
COPY_HEAVY = 0.15    # share spent copying host -> device
POOR_SCALING = 0.70  # throughput per worker against one worker's


def busy_line(summary: dict) -> Optional[str]:
    """How busy the devices were over the run, as measured (jobs/telemetry.py), or None."""
    if summary.get("mean_util") is None:
        return None
    what = "GPU" if summary.get("source") == "nvml" else "CPU"
    if int(summary.get("workers") or 1) > 1:
        what += "s"
    return (f"{what} busy {float(summary['mean_util']):.0f}% of the run "
            f"(p10 {float(summary.get('p10_util') or 0):.0f}%)")


def diagnose(m: dict, single_worker_sps: Optional[float] = None) -> Optional[dict]:
    """A verdict {kind, reasons, advice} from a run's metrics, or None without a breakdown."""
    if "data_fraction" not in m:
        return None
    data, copy = float(m["data_fraction"]), float(m.get("copy_fraction") or 0.0)
    workers = int(m.get("workers") or 1)
    loader = m.get("loader_workers")
    device = str(m.get("device") or "cpu")
    reasons = [f"{data:.0%} of each step waits for data, {copy:.0%} copies it to {device}, "
               f"the rest computes"]
    busy = busy_line((m.get("telemetry") or {}).get("summary") or {})
    if busy:
        reasons.insert(0, busy)
    advice: list[str] = []
    efficiency = None
    if single_worker_sps and workers > 1 and m.get("samples_per_sec"):
        efficiency = float(m["samples_per_sec"]) / (workers * single_worker_sps)
        reasons.append(f"{workers} workers give {efficiency:.0%} of {workers}x one worker's "
                       f"throughput")
    trials = m.get("precision_trials") or {}
    slower = precision_advice(trials, m.get("precision"))
    if slower:  # whatever else held the run back, its steps could be this much shorter
        advice.append(slower)
    if data >= INPUT_BOUND:
        kind = "input-bound"
        if m.get("loader_auto"):
            advice.append(f"loader_workers: auto already chose {loader}, the best this "
                          "machine's cores gave: give each worker more CPUs")
        else:
            more = max(2, 2 * int(loader or 0))
            advice.append(f"raise data.loader_workers from {loader} to {more} (or auto)")
        if device.startswith("cuda") and not m.get("pin_memory"):
            advice.append("set data.pin_memory: true")
        advice.append("move decoding and augmentation out of __getitem__ or cache them")
    elif efficiency is not None and efficiency < POOR_SCALING:
        kind = "communication-bound"
        advice.append(f"fewer workers ({workers} buy {efficiency * workers:.1f}x), a larger "
                      "batch per worker, or GPUs with a faster interconnect")
    else:
        kind = "compute-bound"
        if m.get("precision") == "fp32" and device.startswith("cuda") and not trials:
            advice.append("precision: auto times bf16 and fp16 against fp32 on this GPU at "
                          "the start of the run and keeps the fastest")
        advice.append("a larger batch if memory allows, or a faster GPU")
        if copy >= COPY_HEAVY:
            advice.append("set data.pin_memory: true so copies overlap compute")
    return {"kind": kind, "reasons": reasons, "advice": advice,
            **({"scaling_efficiency": round(efficiency, 3)} if efficiency is not None else {})}
