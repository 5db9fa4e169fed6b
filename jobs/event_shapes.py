"""What an event line may hold: its size, its depth, and each field orch reads, by type and range.

Anything a job runs can print an `::orch::` line, so orch reads none of them until it has the
shape orch's runner gives it: a bounded line of JSON, a known event holding finite numbers,
short strings and small containers, and each field a reader uses (`rank`, `summary`, `metrics`,
...) of the type that reader expects. `problem` says what is wrong with an event, or None; an
event with a problem is dropped whole (the readers note it on the job), never mended, so a
signed event is read exactly as signed. Nothing here raises on a job's text.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

# The runner's largest line, a worker's telemetry with its series, is ~20 KB; a result's
# error may quote a long traceback. The line's bound is what bounds the cost of reading it.
MAX_LINE = 1 << 20
MAX_DEPTH = 6
MAX_ITEMS = 10_000  # in one list or object
MAX_TEXT = 256 * 1024  # one string
MAX_KEY = 200
MAX_RANK = 65_536

# The events orch's runner and workers print (jobs/): any other name is not orch's.
KNOWN = frozenset({"start", "worker", "worker_setup", "worker_error", "precision",
                   "loader_tuned", "progress", "measure", "report", "resume", "pruned", "stopped",
                   "device", "telemetry", "utilization", "verdict", "result",
                   "first_output", "end"})  # the last two: a run: job's (jobs/workspace.py)


def _number(v: Any, lo: float = -math.inf, hi: float = math.inf) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and lo <= v <= hi)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**53


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _text(v: Any) -> bool:
    return isinstance(v, str)


_pos = _optional(lambda v: _number(v, 0.0))
_util = _optional(lambda v: _number(v, 0.0, 100.0))


def _rank(v: Any) -> bool:
    return _count(v) and v < MAX_RANK


# A worker's device over its run (jobs/telemetry.Totals.summary): what `combine` and the
# ledger read, by type; with samples, the figures a summary of samples always has.
_SUMMARY: dict[str, Callable[[Any], bool]] = {
    "source": _optional(_text), "device": _optional(_text), "samples": _optional(_count),
    "seconds": _pos, "mean_util": _util, "p10_util": _util, "peak_mem_gb": _pos,
    "mem_total_gb": _pos, "energy_wh": _pos, "energy_basis": _optional(_text),
    "mean_power_w": _pos, "workers": _optional(_count)}
_SAMPLED = ("mean_util", "p10_util", "peak_mem_gb")
# What some events always hold, not null: the readers index them.
_REQUIRED = {"progress": ("epoch", "epochs", "step", "steps"), "telemetry": ("summary",),
             "measure": ("samples_per_sec", "data_fraction")}

# Fields that readers use, wherever they appear: their types.
_FIELDS: dict[str, Callable[[Any], bool]] = {
    "event": _text, "t": _optional(lambda v: _number(v, 0.0)), "sig": _text,
    "rank": _rank, "index": _optional(_count), "metrics": lambda v: isinstance(v, dict),
    "checkpoint": _optional(_text), "wall_s": _pos, "ok": _optional(lambda v: isinstance(v, bool)),
    "error": _optional(_text), "node_id": _optional(_text), "epoch": _optional(_count),
    "epochs": _optional(_count), "step": _optional(_count), "steps": _optional(_count),
    "summary": lambda v: isinstance(v, dict), "series": lambda v: isinstance(v, list),
    "since_s": _pos, "util": _util, "mem_gb": _pos, "power_w": _pos,
    "source": _optional(_text), "detail": _optional(_text), "reason": _optional(_text),
    "exit_code": _optional(lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "kind": _optional(_text), "samples_per_sec": _pos,
    "data_fraction": _optional(lambda v: _number(v, 0.0, 1.0))}


def problem(event: Any) -> Optional[str]:
    """What keeps a parsed event from being read (naming the field, never quoting the job's
    text), or None when it has the shape orch's runner gives it."""
    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
        return "not an event"
    kind = event["event"]
    if kind not in KNOWN:
        return "an event orch does not know"
    bad = _value(event, 0)
    if bad:
        return f"{kind}: {bad}"
    for name, check in _FIELDS.items():
        if name in event and not check(event[name]):
            return f"{kind}: {name} is not of its type"
    missing = [k for k in _REQUIRED.get(kind, ()) if event.get(k) is None]
    if missing:
        return f"{kind}: without {', '.join(missing)}"
    summary = event.get("summary")
    if isinstance(summary, dict):
        for name, check in _SUMMARY.items():
            if name in summary and not check(summary[name]):
                return f"{kind}: summary.{name} is not of its type"
        if summary.get("samples") and any(summary.get(k) is None for k in _SAMPLED):
            return f"{kind}: a summary of samples without {', '.join(_SAMPLED)}"
    return None


def _value(v: Any, depth: int) -> Optional[str]:
    """What in a JSON value is past the bounds (a number not finite, a string, list or
    object too long, nesting too deep), or None."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return None if -2**63 <= v < 2**63 else "a number out of range"
    if isinstance(v, float):
        return None if math.isfinite(v) else "a number that is not finite"
    if isinstance(v, str):
        return None if len(v) <= MAX_TEXT else "a string too long"
    if depth >= MAX_DEPTH:
        return "nested too deep"
    if isinstance(v, list):
        if len(v) > MAX_ITEMS:
            return "a list too long"
        for x in v:
            bad = _value(x, depth + 1)
            if bad:
                return bad
        return None
    if isinstance(v, dict):
        if len(v) > MAX_ITEMS:
            return "an object with too many keys"
        for k, x in v.items():
            if len(k) > MAX_KEY:
                return "a key too long"
            bad = _value(x, depth + 1)
            if bad:
                return bad
        return None
    return "a value of no JSON type"
