"""The workload trace: one job per CSV line, read with every bad line named, and written back.

Columns (a header line names them, in any order; `#` lines and blank lines are skipped):

    arrival      ISO time (2025-01-06T09:30:00Z; no zone means UTC) or hours from the start
    name         a label for the job
    fingerprint  what runs; jobs with the same fingerprint are repeats of one job
    gpu_hours    the job's work: GPU-hours on `gpus` x `gpu` (wall hours = gpu_hours / gpus)
    gpu          the GPU model that figure refers to, as SkyPilot spells it (A100, H100, ...)
    gpus         how many GPUs the job uses
    deadline_h   hours after arrival by which it must finish; empty for none
    checkpoints  true/false: whether the job saves checkpoints (a spot preemption then
                 loses minutes, not the run)
    kind         optional: exploratory | steady | auto (what `schedule.kind` would say)
    estimate_h   optional: the job file's `estimate.hours` as its author wrote it, wall hours
                 on `gpus` x `gpu`; empty: the file gives none. Without the column every
                 file's estimate is the true wall hours (gpu_hours / gpus).
    speeds       optional: the job's true throughput on other GPU models relative to `gpu`,
                 MODEL=FACTOR;MODEL=FACTOR (H100=1.61;RTX4090=0.71); a model not listed runs
                 at the gpu_speeds ratio.

gpu_hours and speeds are the simulated truth; orch's policy sees estimate_h only.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Mapping, Optional

from orchestrator.base.errors import InputError
from orchestrator.decision.gpus import canonical_gpu, relative_speed

REQUIRED = ("arrival", "name", "fingerprint", "gpu_hours", "gpu", "gpus", "deadline_h", "checkpoints")
COLUMNS = REQUIRED + ("kind",)
BELIEF_COLUMNS = ("estimate_h", "speeds")  # written only when some job needs them
KINDS = ("auto", "exploratory", "steady")
# Hours-from-start traces are placed on this Monday, so weekdays and dates mean something.
DEFAULT_START = datetime(2025, 1, 6, tzinfo=timezone.utc).timestamp()
_TRUE, _FALSE = ("true", "yes", "1", "y", "t"), ("false", "no", "0", "n", "f")
_HINT = "the trace format is in docs/simulate.md; `orch simulate --generate FILE` writes an example"


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace; `arrival_h` is hours after the trace's start."""

    index: int
    arrival_h: float
    name: str
    fingerprint: str
    gpu_hours: float
    gpu: str
    gpus: int
    deadline_h: Optional[float]
    checkpoints: bool
    kind: str = "auto"
    line: int = 0
    # What the job file says: None when it gives no estimate. `estimated` is False when the
    # trace has no estimate_h column: the file's estimate is then the truth, as before.
    estimate_h: Optional[float] = None
    estimated: bool = False
    speeds: tuple[tuple[str, float], ...] = ()  # true speed on a model / on `gpu`

    @property
    def wall_hours(self) -> float:
        """True wall hours on `gpus` x `gpu`."""
        return self.gpu_hours / self.gpus

    @property
    def file_estimate_h(self) -> Optional[float]:
        """The job file's estimate.hours: the estimate_h column, else (no column) the truth."""
        return self.estimate_h if self.estimated else self.wall_hours

    @property
    def due_h(self) -> float:
        return math.inf if self.deadline_h is None else self.arrival_h + self.deadline_h


@dataclass(frozen=True, slots=True)
class Trace:
    jobs: tuple[TraceJob, ...]  # by arrival
    start: float  # epoch seconds of hour 0, midnight UTC
    source: str

    @property
    def days(self) -> int:
        """Whole days from the start to the last arrival, that one included."""
        return max(1, math.ceil((self.jobs[-1].arrival_h + 1e-9) / 24.0)) if self.jobs else 0


def _bad(file: str, line: int, field: str, problem: str, hint: str = _HINT) -> InputError:
    return InputError(f"{file}:{line}: {field}: {problem}", hint)


def _number(file: str, line: int, field: str, text: str, *, positive: bool = True) -> float:
    try:
        v = float(text)
    except ValueError:
        raise _bad(file, line, field, f"{text!r} is not a number") from None
    if not math.isfinite(v) or (positive and v <= 0) or v < 0:
        raise _bad(file, line, field, f"{text} must be {'above zero' if positive else '0 or more'}")
    return v


def _time(file: str, line: int, text: str) -> tuple[str, float]:
    """('hours', h) or ('iso', epoch seconds)."""
    try:
        return "hours", _number(file, line, "arrival", text, positive=False)
    except InputError:
        pass
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise _bad(file, line, "arrival", f"{text!r} is neither an ISO time "
                   "(2025-01-06T09:30:00Z) nor hours from the start (e.g. 12.5)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return "iso", t.timestamp()


def parse_trace(text: str, file: str = "<trace>",
                speeds: Mapping[str, float] | None = None) -> Trace:
    """Read a trace; any bad line is an InputError naming the file, line and column."""
    lines = [(i, ln) for i, ln in enumerate(text.splitlines(), start=1)
             if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise InputError(f"{file}: the trace is empty", _HINT)
    header_line, header = lines[0]
    names = [h.strip().lower() for h in next(csv.reader([header]))]
    unknown = [n for n in names if n not in COLUMNS + BELIEF_COLUMNS]
    if unknown:
        raise _bad(file, header_line, unknown[0], "unknown column",
                   f"the columns are {', '.join(COLUMNS + BELIEF_COLUMNS)} (kind, estimate_h "
                   "and speeds are optional)")
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise InputError(f"{file}:{header_line}: the header lacks column "
                         f"{', '.join(missing)}", f"the header is {','.join(COLUMNS)}")
    rows: list[tuple] = []
    styles: set[str] = set()
    for no, ln in lines[1:]:
        cells = next(csv.reader([ln]))
        if len(cells) != len(names):
            raise _bad(file, no, names[min(len(cells), len(names) - 1)],
                       f"{len(cells)} values for {len(names)} columns", _HINT)
        row = {n: c.strip() for n, c in zip(names, cells)}
        for col in ("arrival", "name", "fingerprint", "gpu_hours", "gpu", "gpus", "checkpoints"):
            if not row[col]:
                raise _bad(file, no, col, "empty; every job needs one")
        style, when = _time(file, no, row["arrival"])
        styles.add(style)
        if len(styles) > 1:
            raise _bad(file, no, "arrival", "mixes ISO times and hours from the start; use one")
        gpu = canonical_gpu(row["gpu"])
        if relative_speed(gpu, speeds) is None:
            raise _bad(file, no, "gpu", f"no speed figure for {row['gpu']!r}",
                       "use a GPU name as SkyPilot spells it (A100, H100, RTX4090, ...) or add "
                       "it to the gpu_speeds setting")
        gpus = _number(file, no, "gpus", row["gpus"])
        if not gpus.is_integer():
            raise _bad(file, no, "gpus", f"{row['gpus']} is not a whole number of GPUs")
        deadline = _number(file, no, "deadline_h", row["deadline_h"]) if row["deadline_h"] else None
        ck = row["checkpoints"].lower()
        if ck not in _TRUE + _FALSE:
            raise _bad(file, no, "checkpoints", f"{row['checkpoints']!r}: write true or false")
        kind = (row.get("kind") or "auto").lower()
        if kind not in KINDS:
            raise _bad(file, no, "kind", f"{row['kind']!r}: write exploratory, steady or auto")
        est = row.get("estimate_h", "")
        rows.append((when, no, row["name"], row["fingerprint"],
                     _number(file, no, "gpu_hours", row["gpu_hours"]), gpu, int(gpus), deadline,
                     ck in _TRUE, kind, _number(file, no, "estimate_h", est) if est else None,
                     _speeds(file, no, row.get("speeds", ""), gpu, speeds)))
    if not rows:
        raise InputError(f"{file}: the trace has a header but no jobs", _HINT)
    if styles == {"iso"}:
        first = min(r[0] for r in rows)
        start = datetime.fromtimestamp(first, timezone.utc).replace(
            hour=0, minute=0, second=0, microsecond=0).timestamp()
        to_h = lambda w: (w - start) / 3600.0  # noqa: E731
    else:
        start, to_h = DEFAULT_START, (lambda w: w)
    rows.sort(key=lambda r: (r[0], r[1]))  # by arrival, file order among equals
    jobs = tuple(TraceJob(index=i, arrival_h=to_h(r[0]), line=r[1], name=r[2], fingerprint=r[3],
                          gpu_hours=r[4], gpu=r[5], gpus=r[6], deadline_h=r[7], checkpoints=r[8],
                          kind=r[9], estimate_h=r[10], estimated="estimate_h" in names,
                          speeds=r[11]) for i, r in enumerate(rows))
    return Trace(jobs=jobs, start=start, source=file)


def _speeds(file: str, line: int, text: str, gpu: str,
            known: Mapping[str, float] | None) -> tuple[tuple[str, float], ...]:
    """MODEL=FACTOR;MODEL=FACTOR -> ((model, factor), ...) by model; `gpu` itself is 1."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        model, eq, factor = part.partition("=")
        if not eq or not model.strip():
            raise _bad(file, line, "speeds", f"{part!r}: write MODEL=FACTOR, e.g. H100=1.61")
        m = canonical_gpu(model.strip())
        if relative_speed(m, known) is None:
            raise _bad(file, line, "speeds", f"no speed figure for {model.strip()!r}",
                       "use a GPU name as SkyPilot spells it (A100, H100, RTX4090, ...)")
        f = _number(file, line, "speeds", factor.strip())
        if m == gpu and abs(f - 1.0) > 1e-9:
            raise _bad(file, line, "speeds", f"{part}: the job's own gpu {gpu} is 1 by definition")
        if m in out:
            raise _bad(file, line, "speeds", f"{m} is given twice")
        out[m] = f
    out.pop(gpu, None)
    return tuple(sorted(out.items()))


def load_trace(path: str | Path, speeds: Mapping[str, float] | None = None) -> Trace:
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: no such trace file",
                         "`orch simulate --generate FILE` writes one to start from") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read the trace: {e}") from None
    return parse_trace(text, str(path), speeds)


def _num(v: float) -> str:
    return f"{v:.3f}".rstrip("0").rstrip(".")


def format_trace(jobs: Iterable[TraceJob], start: float = DEFAULT_START) -> str:
    """The CSV text of a trace, ISO arrival times in UTC to the second."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    jobs = list(jobs)
    beliefs = any(j.estimated or j.speeds for j in jobs)
    w.writerow(COLUMNS + (BELIEF_COLUMNS if beliefs else ()))
    for j in jobs:
        when = datetime.fromtimestamp(start + round(j.arrival_h * 3600), timezone.utc)
        row = [when.strftime("%Y-%m-%dT%H:%M:%SZ"), j.name, j.fingerprint, _num(j.gpu_hours),
               j.gpu, j.gpus, "" if j.deadline_h is None else _num(j.deadline_h),
               "true" if j.checkpoints else "false", j.kind]
        if beliefs:
            est = j.file_estimate_h
            row += ["" if est is None else _num(est),
                    ";".join(f"{m}={_num(f)}" for m, f in j.speeds)]
        w.writerow(row)
    return buf.getvalue()
