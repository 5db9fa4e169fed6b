"""Rendering helpers shared by the CLI commands: consoles, JSON, tables, durations."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from orchestrator.records.metrics import RunMetrics


def _console(stderr: bool = False) -> Console:
    c = Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)
    if not c.is_terminal:  # piped or captured: don't squeeze tables into 80 columns
        c = Console(stderr=stderr, highlight=False, soft_wrap=True, width=200, emoji=False)
    return c


out = _console()
err = _console(stderr=True)

STATUS_STYLE = {"PENDING": "yellow", "RUNNING": "cyan", "SUCCEEDED": "green",
                "FAILED": "red", "CANCELLED": "magenta"}


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


# A command that has not answered within this long shows what it is doing (on a terminal).
SLOW_S = 0.5


@contextlib.contextmanager
def slow(what: str, after_s: float = SLOW_S) -> Iterator[None]:
    """Show `what` with a spinner on stderr while the block runs, from `after_s` on: a
    command that answers at once prints nothing more; one that waits on a backend or an
    import says what it waits for. Only on a terminal (piped output stays clean)."""
    if not err.is_terminal:
        yield
        return
    status = err.status(what)
    lock = threading.Lock()
    state = {"over": False, "shown": False}

    def show() -> None:
        with lock:
            if not state["over"]:
                status.start()
                state["shown"] = True

    timer = threading.Timer(after_s, show)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["over"] = True
            if state["shown"]:
                status.stop()


def note(text: str) -> None:
    """Something a user should know while a command works: on stderr, so --json stays clean."""
    from rich.markup import escape

    err.print(f"[yellow]note:[/] {escape(text)}")


def local_only(command: str, acts_on: str) -> None:
    """Say, when ORCH_SERVER is set, that `orch COMMAND` does not go through the server: it
    acts on `acts_on` of this machine."""
    from orchestrator.settings import load_settings

    server = load_settings().server
    if server:
        note(f"`orch {command}` works on {acts_on}, not through ORCH_SERVER ({server})")


def status_text(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"


def duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def job_duration(created: Optional[float], started: Optional[float],
                 finished: Optional[float]) -> Optional[float]:
    """Seconds a job has run, or waited before it started (epoch seconds in)."""
    start = started or created
    if start is None:
        return None
    return (finished or time.time()) - start


PHASE_LABELS = {"submit_to_recorded": "submit→recorded", "recorded_to_launched": "→launched",
                "launched_to_driver": "→driver", "driver_to_workers": "→workers",
                "driver_to_first_output": "→first output",
                "workers_to_first_step": "→first step", "training": "training",
                "last_step_to_ended": "last step→ended"}


def phase_summary(phases: dict) -> str:
    """'submit→recorded 0.4s  →launched 0.9s ... (fixed 19.8s of 20.2s)' from a job's phases."""
    parts = [f"{label} {phases[k]:.1f}s" for k, label in PHASE_LABELS.items() if k in phases]
    total = sum(v for v in phases.values())
    fixed = total - phases.get("training", 0.0)
    return "  ".join(parts) + f"  (fixed {fixed:.1f}s of {total:.1f}s)"


def device_summary(metrics: RunMetrics) -> Optional[str]:
    """How busy a job's devices were (the runner's telemetry, jobs/telemetry.py): over the
    whole run once it ended, else each worker's latest 30 s; None when none was measured."""
    s = metrics.summary()
    if s is not None and s.mean_util is not None:
        what = "GPU" if s.source == "nvml" else "CPU"
        of = f" of {s.mem_total_gb:.0f}" if s.mem_total_gb and what == "GPU" else ""
        workers = int(s.workers or 1)
        text = (f"{what} busy {s.mean_util:.0f}% (p10 {s.p10_util or 0:.0f}%), peak "
                f"{s.peak_mem_gb or 0:.2f} GiB{of}, {workers} worker{'s' if workers != 1 else ''}")
        if s.energy_wh is not None:
            text += f", {s.energy_wh:.1f} Wh ({s.energy_basis})"
        return text + (f" [{s.device}]" if what == "GPU" and s.device else "")
    now = metrics.device_now or {}
    if now:
        return "now: " + ", ".join(f"rank {r} {p.util or 0:.0f}% busy, {p.mem_gb or 0:.2f} GiB"
                                   for r, p in sorted(now.items()))
    return None


def metric_summary(metrics: RunMetrics) -> str:
    """'epoch 3/3  loss 0.1234  samples/s 1,234' from what a run reported."""
    parts = []
    said = metrics.reported()
    if "epoch" in said and "epochs" in said:
        parts.append(f"epoch {said['epoch']}/{said['epochs']}")
    for key, label, fmt in (("loss", "loss", "{:.4f}"), ("accuracy", "accuracy", "{:.3f}"),
                            ("samples_per_sec", "samples/s", "{:,.0f}")):
        value = metrics.number(key)
        if value is not None:
            parts.append(f"{label} {fmt.format(value)}")
    return "  ".join(parts)


def failure_lines(metrics: RunMetrics, indent: str = "  ") -> list[str]:
    """A failed job's last error lines and orch's hint (service/why_failed.py), as printed
    under its message; escaped, since they are the job's own output."""
    from rich.markup import escape

    failure = metrics.failure
    if failure is None:
        return []
    lines = [f"{indent}[dim]| {escape(line)}[/]" for line in failure.lines]
    if failure.hint:
        lines.append(f"{indent}[yellow]hint:[/] {escape(failure.hint)}")
    return lines


def table(columns: Iterable[str], rows: Iterable[Iterable[Any]], title: Optional[str] = None) -> Table:
    t = Table(title=title, show_edge=False, header_style="bold")
    for c in columns:
        t.add_column(c, no_wrap=c in ("ID", "STATUS", "TARGET", "KIND"))
    for r in rows:
        t.add_row(*[("-" if v is None else str(v)) for v in r])
    return t
