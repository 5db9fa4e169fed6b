"""A job's metrics as orch keeps them: read from the events in its log, plus scaling."""

from __future__ import annotations

from typing import Optional, Sequence

from jobs import events
from jobs.telemetry import combine
from jobs.verdict import diagnose
from orchestrator.records.metrics import RunMetrics

# What orch derives a job's outcome, device figures and run window from: a metric of that name
# (a report's, which the job's code chooses) never stands in for one.
_DERIVED = ("_result", "verdict", "stopped", "dropped_events", "telemetry", "device_now",
            "run_settings", "utilization", "reports", "phases", "scaling", "wall_s")
DROPPED_SHOWN = 5  # the first few dropped lines' reasons kept with the job


def _metrics(ev: dict) -> dict:
    metrics = ev.get("metrics")
    if not isinstance(metrics, dict):
        return {}
    return {k: v for k, v in metrics.items() if k not in _DERIVED}


def _fields(ev: dict) -> dict:
    return {k: v for k, v in ev.items() if k not in ("event", "t", events.SIG)}


def from_log(text: str, previous: Optional[RunMetrics] = None, *, key: Optional[str] = None,
             budgeted: bool = True) -> dict:
    """The last report's metrics, the run's chosen settings and the result, from events.
    The `result` event's fields are left under `_result` for the caller to judge the run by.

    Anything the job runs can print an event line. `key`: the job's event key, with which
    orch's runner signs its `result` and `verdict` (jobs/events.py); given, an unsigned or
    badly signed one is left out whole, so the job's own lines (a `run:` job's, whose
    command has no runner, or a `train:` job's workers') never set its outcome or verdict.
    None (a job recorded before keys): read as they come. `stopped` is printed by rank 0's
    worker, where the job's code runs, so no key can vouch for it: it is read only for a
    job with a budget (`budgeted`), where all it can do is end a run that succeeded as
    CANCELLED rather than SUCCEEDED."""
    metrics = previous.to_dict() if previous is not None else {}
    found, dropped = events.read(text or "")
    if dropped:  # the log is read whole each time: the count is this log's
        metrics["dropped_events"] = {"count": len(dropped), "first": dropped[:DROPPED_SHOWN]}
    for ev in found:
        kind = ev["event"]
        if key and kind in events.STATE_EVENTS and not events.verified(ev, key):
            continue  # not the runner's
        if kind == "report":
            metrics.update(_metrics(ev))
            metrics["reports"] = ev.get("index")
            if ev.get("checkpoint"):
                metrics["checkpoint"] = ev["checkpoint"]
        elif kind == "measure":  # the first minute's throughput, until a report says more
            for name in ("samples_per_sec", "data_fraction"):
                if name not in metrics:
                    metrics[name] = ev[name]
        elif kind == "worker_setup":
            metrics["run_settings"] = _fields(ev)
        elif kind == "precision":  # what `precision: auto` chose, and from what
            metrics.setdefault("run_settings", {})["precision"] = ev.get("chosen")
        elif kind == "loader_tuned":  # what `loader_workers: auto` chose, and from what
            metrics.setdefault("run_settings", {}).update(
                loader_workers=ev.get("chosen"), loader_tuning=ev.get("seconds_per_batch"))
        elif kind == "stopped" and budgeted:  # the run stopped itself (its budget was spent)
            metrics["stopped"] = _fields(ev)
        elif kind == "verdict":
            metrics["verdict"] = _fields(ev)
        elif kind == "device":  # a worker's latest point, while the run goes on
            point = {k: v for k, v in _fields(ev).items() if k != "rank"}
            metrics.setdefault("device_now", {})[str(ev.get("rank", 0))] = point
        elif kind == "telemetry":  # a worker's device over the whole run, at its end
            workers = metrics.setdefault("telemetry", {}).setdefault("workers", {})
            workers[str(ev.get("rank", 0))] = {k: v for k, v in _fields(ev).items() if k != "rank"}
        elif kind == "utilization":  # the runner found every device idle (utilization_policy)
            metrics["utilization"] = _fields(ev)
        elif kind == "result":
            metrics.update(_metrics(ev))
            metrics["wall_s"] = ev.get("wall_s")
            if ev.get("checkpoint"):
                metrics["checkpoint"] = ev["checkpoint"]
            metrics["_result"] = _fields(ev)
    tel = metrics.get("telemetry")
    if isinstance(tel, dict) and isinstance(tel.get("workers"), dict) and tel["workers"]:
        tel["summary"] = combine({r: w.get("summary") or {} for r, w in tel["workers"].items()
                                  if isinstance(w, dict)})
        metrics.pop("device_now", None)  # the run is over: its summary says more
        if metrics.get("verdict") and "data_fraction" in metrics:  # the verdict, with how busy
            metrics["verdict"] = diagnose(metrics) or metrics["verdict"]
    return metrics


def add_scaling(metrics: dict, earlier: Sequence[dict]) -> None:
    """With N workers, throughput against one worker's (the median of earlier successful
    one-worker runs' metrics); the verdict is redone with it."""
    workers = int(metrics.get("workers") or 1)
    if workers < 2 or not metrics.get("samples_per_sec"):
        return
    singles = sorted(m["samples_per_sec"] for m in earlier
                     if m.get("workers") == 1 and m.get("samples_per_sec"))
    if not singles:
        return
    single = singles[len(singles) // 2]
    metrics["scaling"] = {"workers": workers, "one_worker_samples_per_sec": single,
                          "speedup": metrics["samples_per_sec"] / single,
                          "efficiency": metrics["samples_per_sec"] / (workers * single)}
    verdict = diagnose(metrics, single)
    if verdict:
        metrics["verdict"] = verdict


# A job's phases, in order: (name, the moment it ends). The moments come from orch's record
# (submitted, recorded, launched, ended) and from the runner's events (their `t`).
PHASES = ("submit_to_recorded", "recorded_to_launched", "launched_to_driver",
          "driver_to_workers", "workers_to_first_step", "training", "last_step_to_ended")

# A `run:` job's: its command started (`start`), first printed (`first_output`), exited (`end`).
RUN_PHASES = ("submit_to_recorded", "recorded_to_launched", "launched_to_driver",
              "driver_to_first_output", "training", "last_step_to_ended")


def phases(text: str, *, submitted: Optional[float], recorded: float,
           launched: Optional[float], ended: float) -> dict[str, float]:
    """Seconds in each phase of a finished job, those that can be told from its record and
    log: submit -> recorded -> launched -> driver started (`start`) -> workers ready
    (`worker_setup`) -> first step (first `progress`) -> last step (last `report`) -> ended.
    A phase whose two ends are not both known is left out. `submitted` is when the process
    that submitted started (`orch submit`'s own start-up and planning count)."""
    first: dict[str, float] = {}
    last_report = None
    for ev in events.parse(text or ""):
        t = ev.get("t")
        if not isinstance(t, (int, float)):
            continue
        first.setdefault(ev["event"], t)
        if ev["event"] == "report":
            last_report = t
    names: tuple[str, ...] = PHASES
    moments = [submitted, recorded, launched, first.get("start"), first.get("worker_setup"),
               first.get("progress"), last_report, ended]
    if "first_output" in first and "worker_setup" not in first:  # a run: job (jobs/workspace.py)
        names = RUN_PHASES
        moments = [submitted, recorded, launched, first.get("start"), first["first_output"],
                   first.get("end"), ended]
    out = {}
    for name, a, b in zip(names, moments, moments[1:]):
        if a is not None and b is not None:
            out[name] = round(max(0.0, b - a), 2)
    return out
