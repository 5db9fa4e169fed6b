"""Following a running job: stream its log, draw epoch/step progress, stop when it ends."""

from __future__ import annotations

import time

from rich.console import Console
from rich.text import Text
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from jobs import events
from orchestrator.cli.render import metric_summary
from orchestrator.store import TERMINAL

# Ray Train's own per-report lines repeat what the report event already shows.
_NOISE = ("Reporting training result", "Checkpoint successfully created at")


def follow(orch, rec: dict, console: Console, poll_s: float = 1.0) -> dict:
    """Print the job's new log lines and progress until it finishes; return the final record."""
    printed = 0
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
                        console=console, transient=True)
    epoch_task = step_task = None
    with progress:
        while True:
            rec = orch.refresh(orch.get(rec["id"]))
            try:
                text = orch.logs(rec)
            except Exception:  # a log read that fails mid-run is retried on the next poll
                text = ""
            lines = text.splitlines()
            # A log that got shorter was replaced by the saved copy; keep our place.
            for line in lines[printed:]:
                ev = events.parse_line(line)
                if ev is None:
                    if not any(n in line for n in _NOISE):
                        # Ray colours its prefixes; let rich keep or drop them per terminal.
                        progress.console.print(Text.from_ansi(line), highlight=False)
                    continue
                kind = ev["event"]
                if kind == "progress":
                    if epoch_task is None:
                        epoch_task = progress.add_task("epochs", total=ev["epochs"], detail="")
                        step_task = progress.add_task("steps", total=ev["steps"], detail="")
                    progress.update(epoch_task, completed=ev["epoch"] - 1, total=ev["epochs"])
                    progress.update(step_task, completed=ev["step"], total=ev["steps"],
                                    description=f"epoch {ev['epoch']}")
                elif kind == "report":
                    m = ev.get("metrics") or {}
                    if epoch_task is not None and "epoch" in m:
                        progress.update(epoch_task, completed=m["epoch"], detail=metric_summary(m))
                    progress.console.print(f"[bold]report[/] {metric_summary(m) or m}")
                elif kind == "worker_setup":
                    progress.console.print(
                        f"[bold]workers[/] {ev.get('world_size')} on {ev.get('device')}, "
                        f"precision {ev.get('precision')}, loader workers {ev.get('loader_workers')}, "
                        f"pin_memory {ev.get('pin_memory')}")
            printed = max(printed, len(lines))
            if rec["status"] in TERMINAL:
                return rec
            time.sleep(poll_s)
