"""Following a running job: stream its log, draw epoch/step progress, stop when it ends."""

from __future__ import annotations

import calendar
import time
from typing import TYPE_CHECKING, Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from jobs import events
from orchestrator.cli.render import job_duration, metric_summary
from orchestrator.records.metrics import RunMetrics

if TYPE_CHECKING:
    from orchestrator.records import JobDetail, JobRecord

# Ray Train's own per-report lines repeat what the report event already shows.
_NOISE = ("Reporting training result", "Checkpoint successfully created at")


def when(value) -> Optional[float]:
    """Epoch seconds from a record's time: an ISO string (the JSON shape) or a number."""
    if value is None or isinstance(value, (int, float)):
        return value
    return float(calendar.timegm(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ")))


def run_time(rec: JobRecord) -> Optional[float]:
    """Seconds a job has run (or waited, before it started), from its public record."""
    return job_duration(when(rec.created_at), when(rec.started_at), when(rec.finished_at))


def precision_summary(ev: dict) -> str:
    """'fp32 (auto; a step took fp32 6.1 ms, bf16 5.6 ms)' from a `precision` event."""
    trials = ev.get("seconds_per_step") or {}
    figures = ", ".join(f"{p} {s * 1000:.1f} ms" for p, s in trials.items())
    how = "auto" if ev.get("requested") == "auto" else "as asked"
    return f"{ev.get('chosen')} ({how}; a step took {figures})" if figures else str(ev.get("chosen"))


def follow(client, rec: JobRecord, console: Console) -> JobDetail:
    """Print the job's log lines and progress until it finishes; return its final record
    (with history). `client` is orchestrator.client's Local or Remote."""
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
                        console=console, transient=True)
    tasks: Optional[tuple[TaskID, TaskID]] = None  # (epochs, steps), once progress is reported
    with progress:
        for line in client.stream(rec.id):  # until the job ends
            ev = events.parse_line(line)
            if ev is None:
                if not any(n in line for n in _NOISE):
                    # Ray colours its prefixes; let rich keep or drop them per terminal.
                    progress.console.print(Text.from_ansi(line), highlight=False)
                continue
            kind = ev["event"]
            if kind == "progress":
                if tasks is None:
                    tasks = (progress.add_task("epochs", total=ev["epochs"], detail=""),
                             progress.add_task("steps", total=ev["steps"], detail=""))
                epoch_task, step_task = tasks
                progress.update(epoch_task, completed=ev["epoch"] - 1, total=ev["epochs"])
                progress.update(step_task, completed=ev["step"], total=ev["steps"],
                                description=f"epoch {ev['epoch']}")
            elif kind == "report":
                m = RunMetrics.read(ev.get("metrics"))
                epoch = m.number("epoch")
                if tasks is not None and epoch is not None:
                    progress.update(tasks[0], completed=epoch, detail=metric_summary(m))
                progress.console.print(f"[bold]report[/] {metric_summary(m) or m.to_dict()}")
            elif kind == "worker_setup":
                precision = ("auto" if ev.get("precision_requested") == "auto"
                             else ev.get("precision"))
                progress.console.print(
                    f"[bold]workers[/] {ev.get('world_size')} on {ev.get('device')}, "
                    f"precision {precision}, loader workers {ev.get('loader_workers')}, "
                    f"pin_memory {ev.get('pin_memory')}")
            elif kind == "precision":
                progress.console.print(f"[bold]precision[/] {precision_summary(ev)}")
            elif kind == "measure":
                progress.console.print(
                    f"[bold]measured[/] {ev['samples_per_sec']:,.0f} samples/s over "
                    f"{ev.get('steps') or 0} steps, {ev['data_fraction']:.0%} of a step waiting for data")
    return client.job(rec.id)
