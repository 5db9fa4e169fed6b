"""The one small interface the CLI's job commands talk to, whichever client serves it:
`Local` (orch in this process) or `Remote` (an `orch serve`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Protocol, Union

if TYPE_CHECKING:
    from orchestrator.records import (
        CancelledJob,
        JobDetail,
        JobRecord,
        Registered,
        Schedule,
        SubmittedGroup,
        SubmittedJob,
        SubmittedPipeline,
        SubmittedSweep,
    )
    from orchestrator.records.cost import CostReport
    from orchestrator.records.placement import GroupPlan, PipelinePlan, Plan, SweepPlan
    from orchestrator.spec import Overrides

Submitted = Union["SubmittedJob", "SubmittedPipeline", "SubmittedGroup", "SubmittedSweep", "Registered"]
Planned = Union["Plan", "PipelinePlan", "GroupPlan", "SweepPlan"]


class Client(Protocol):
    """The operations the CLI's job commands need; each returns the typed record its
    `--json` output is the dump of (`records`)."""

    def submit(self, file: Path, key: Optional[str] = None, priority: int = 0,
               given: Optional[Overrides] = None) -> Submitted:
        """Record and start a job: its record, `existing` when `key` was seen before; a job
        file with `schedule.cron` sent to a server: the schedule (`Registered`); a pipeline
        (several YAML documents): each stage's record (`SubmittedPipeline`).
        `given`: the command line's --env / --secret values, over the file's."""

    def plan(self, file: Path, given: Optional[Overrides] = None) -> Planned:
        """The `orch plan --json` shape; a pipeline's: each stage's plan (`PipelinePlan`)."""

    def jobs(self, limit: int = 50) -> list[JobRecord]:
        """The newest jobs, each checked with its backend first."""

    def job(self, job_id: str) -> JobDetail:
        """One job with its history; its `warning` says why it may be stale (None when
        its backend answered)."""

    def logs(self, job_id: str) -> str:
        """The job's log so far, secrets redacted."""

    def stream(self, job_id: str) -> Iterator[str]:
        """The job's log lines as they come, until the job ends."""

    def cancel(self, job_id: str) -> CancelledJob:
        """Stop a job; its record (`already_ended` when it had ended before)."""

    def cancel_sweep(self, sweep_id: str) -> list[CancelledJob]:
        """Stop every run of a sweep at once; each run's record."""

    def cost(self, by: str = "target", since: Optional[str] = None) -> CostReport:
        """The `orch cost --json` report."""

    def schedules(self) -> list[Schedule]:
        """Every cron schedule, each with its recent log."""

    def schedule(self, sched_id: str) -> Schedule:
        """One schedule (an id or a unique prefix) with its recent log."""

    def pause_schedule(self, sched_id: str, paused: bool = True) -> Schedule:
        """Pause (or resume) a schedule; `unchanged` when it already was."""

    def remove_schedule(self, sched_id: str) -> Schedule:
        """Delete a schedule and its log; the jobs it ran are kept. What it was."""


Note = Optional[Callable[[str], None]]

def note(on_note: Note, text: str) -> None:
    """Tell `on_note` what a user should know while a command works, if anyone listens."""
    if on_note is not None:
        on_note(text)
