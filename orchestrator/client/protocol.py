"""The one small interface the CLI's job commands talk to, whichever client serves it:
`Local` (orch in this process) or `Remote` (an `orch serve`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Protocol

if TYPE_CHECKING:
    from orchestrator.spec import Overrides


class Client(Protocol):
    """The operations the CLI's job commands need; each returns plain JSON data."""

    def submit(self, file: Path, key: Optional[str] = None, priority: int = 0,
               given: Optional[Overrides] = None) -> dict:
        """Record and start a job: its record, with "existing": True when `key` was seen
        before; a job file with `schedule.cron` sent to a server: {"schedule": {...}}; a
        pipeline (several YAML documents): {"pipeline": name, "stages": [record, ...]}.
        `given`: the command line's --env / --secret values, over the file's."""

    def plan(self, file: Path, given: Optional[Overrides] = None) -> dict:
        """The `orch plan --json` shape; a pipeline's: {"pipeline": name, "stages": [plan, ...]}."""

    def jobs(self, limit: int = 50) -> list[dict]:
        """The newest jobs, each checked with its backend first."""

    def job(self, job_id: str) -> dict:
        """One job with its history; its "warning" says why it may be stale (None when
        its backend answered)."""

    def logs(self, job_id: str) -> str:
        """The job's log so far, secrets redacted."""

    def stream(self, job_id: str) -> Iterator[str]:
        """The job's log lines as they come, until the job ends."""

    def cancel(self, job_id: str) -> dict:
        """Stop a job; its record ("already_ended": True when it had ended before)."""

    def cost(self, by: str = "target", since: Optional[str] = None) -> dict:
        """The `orch cost --json` report."""

    def schedules(self) -> list[dict]:
        """Every cron schedule, each with its recent log."""

    def schedule(self, sched_id: str) -> dict:
        """One schedule (an id or a unique prefix) with its recent log."""

    def pause_schedule(self, sched_id: str, paused: bool = True) -> dict:
        """Pause (or resume) a schedule; "unchanged": True when it already was."""

    def remove_schedule(self, sched_id: str) -> dict:
        """Delete a schedule and its log; the jobs it ran are kept. What it was."""


Note = Optional[Callable[[str], None]]

def note(on_note: Note, text: str) -> None:
    """Tell `on_note` what a user should know while a command works, if anyone listens."""
    if on_note is not None:
        on_note(text)
