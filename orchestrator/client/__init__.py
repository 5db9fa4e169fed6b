"""What the CLI talks to: `Local` runs orch in this process, `Remote` asks an `orch serve`.

Both implement one small interface (`protocol.Client`) and return the `--json` shapes
(`records.JobRecord`s, the plan and cost reports), so every command renders the same
output either way. `connect()` picks `Remote` when ORCH_SERVER is set. No SDK is imported
here. `Local` calls the service through its one door (`service.orch.Orch`), as `orch serve`
does.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from orchestrator.base.errors import NotFound
from orchestrator.client.protocol import Client, Note, Planned, Submitted, note
from orchestrator.client.remote import MiB, Remote
from orchestrator.records import Schedule
from orchestrator.store import TERMINAL, store_exists

# A follower looks at a job 4 times a second for this long after it starts following it,
# then once a second: a near-empty job ends within it (3-4 s on 2 cores), and a look costs
# the local Ray a few milliseconds.
QUICK_S = 10.0

if TYPE_CHECKING:
    from orchestrator.records import CancelledJob, JobDetail, JobRecord, JobRow
    from orchestrator.records.cost import CostReport
    from orchestrator.records.placement import Plan
    from orchestrator.service.orch import Orch
    from orchestrator.spec import Overrides

__all__ = ["Client", "Local", "MiB", "Note", "Remote", "connect"]


def connect(settings=None, on_ray_start: Optional[Callable[[], None]] = None,
            on_note: Note = None) -> Client:
    """`Remote` when settings.server (ORCH_SERVER) is set, else `Local`. `on_note` is told
    what a user should know while a command works (a workdir being sent, say)."""
    if settings is None:
        from orchestrator.settings import load_settings

        settings = load_settings()
    if settings.server:
        return Remote(settings.server, settings.token.get_secret_value() if settings.token else None,
                      upload_max_bytes=settings.upload_max_mb * MiB, on_note=on_note,
                      retry_s=settings.server_retry_s)
    return Local(settings, on_ray_start, on_note=on_note)


class Local:
    """orch in this process: the `Orch` service on this machine's store and backends."""

    def __init__(self, settings, on_ray_start: Optional[Callable[[], None]] = None, orch=None,
                 on_note: Note = None):
        from orchestrator.service.orch import Orch

        self.settings = settings
        self.orch = orch or Orch(settings, on_ray_start=on_ray_start)
        self.on_note = on_note

    def close(self) -> None:
        self.orch.close()  # its store, if it was used

    def submit(self, file: Path, key: Optional[str] = None, priority: int = 0,
               given: Optional[Overrides] = None) -> Submitted:
        from orchestrator.records import SubmittedGroup, SubmittedJob, SubmittedPipeline, SubmittedSweep
        from orchestrator.spec.job_group import JobGroup
        from orchestrator.spec.pipeline import Pipeline, load_job

        spec = load_job(file, given)
        if not isinstance(spec, (JobGroup, Pipeline)) and spec.sweep is not None:
            runs = self.orch.submit_sweep(spec, idempotency_key=key)
            return SubmittedSweep(sweep=runs[0].rec.info.sweep or "", name=spec.name or "sweep",
                                  runs=[SubmittedJob.from_row(s.rec, existing=s.existing)
                                        for s in runs])
        if isinstance(spec, JobGroup):
            tasks = self.orch.submit_group(spec, idempotency_key=key)
            return SubmittedGroup(group=spec.name, tasks=[
                SubmittedJob.from_row(s.rec, existing=s.existing) for s in tasks])
        if isinstance(spec, Pipeline):
            done = self.orch.submit_pipeline(spec, idempotency_key=key)
            return SubmittedPipeline(pipeline=spec.name, stages=[
                SubmittedJob.from_row(s.rec, existing=s.existing) for s in done])
        if spec.schedule.cron:  # schedules are kept and run by `orch serve` only
            note(self.on_note, f"schedule.cron {spec.schedule.cron!r} is run by `orch serve`: "
                  "alone, this job runs once, now. Submit it with ORCH_SERVER set to register "
                  "its schedule with a server")
        rec, existing = self.orch.submit(spec, idempotency_key=key)
        return SubmittedJob.from_row(rec, existing=existing)

    def plan(self, file: Path, given: Optional[Overrides] = None) -> Planned:
        from orchestrator.records.placement import GroupPlan, PipelinePlan
        from orchestrator.spec.job_group import JobGroup
        from orchestrator.spec.pipeline import Pipeline, load_job

        job = load_job(file, given)
        if not isinstance(job, (JobGroup, Pipeline)) and job.sweep is not None:
            from orchestrator.records.placement import SweepPlan
            from orchestrator.spec.sweep import run_label
            from orchestrator.spec.sweep_runs import expand

            plans = [self.plan_spec(run) for run in expand(job)]
            costs = [float(p.estimate.cost_usd or 0.0) if p.estimate else 0.0 for p in plans]
            return SweepPlan(sweep=job.name or "sweep", values=[run_label(v) for v in job.sweep.values()],
                             runs=plans, total_cost_usd=sum(costs))
        if isinstance(job, JobGroup):  # each task placed on its own, as its submit would
            return GroupPlan(group=job.name, task_names=job.task_names(),
                             tasks=[self.plan_spec(s) for s in job.tasks])
        if isinstance(job, Pipeline):  # each stage placed on its own, as its submit would
            return PipelinePlan(pipeline=job.name, stages=[self.plan_spec(s) for s in job.stages])
        return self.plan_spec(job)

    def plan_spec(self, spec, owner: Optional[str] = None) -> Plan:
        """The plan a submit by `owner` would make (None: this machine's user, whose runs
        are all the store has)."""
        # What a submit would refuse before recording, a plan refuses too.
        return self.orch.plan(spec, owner).shown()

    def jobs(self, limit: int = 50) -> list[JobRecord]:
        return self.orch.job_records(limit)

    def job(self, job_id: str) -> JobDetail:
        return self.orch.job_detail(job_id)

    def logs(self, job_id: str) -> str:
        return self.orch.logs(self.orch.refresh(self.orch.get(job_id)))

    def poll(self, job_id: str) -> tuple[JobRow, str]:
        """The job's record, checked with its backend, and its whole log so far."""
        return self.orch.poll(job_id)

    def stream(self, job_id: str, poll_s: float = 1.0, quick_s: float = QUICK_S) -> Iterator[str]:
        rec, printed = self.orch.get(job_id), 0
        began = time.monotonic()
        while True:
            rec, text = self.poll(rec.id)
            lines = text.splitlines()
            yield from lines[printed:]
            # A log that got shorter was replaced by the saved copy; keep our place.
            printed = max(printed, len(lines))
            if rec.status in TERMINAL:
                return
            # Quicker looks in the first seconds (a short job ends in them, and its user
            # waits for its first lines) and once the runner has said its result.
            soon = self.orch.ending(text) or time.monotonic() - began < quick_s
            time.sleep(min(poll_s, 0.25) if soon else poll_s)

    def cancel(self, job_id: str) -> CancelledJob:
        return self.orch.cancel_job(job_id)

    def cancel_sweep(self, sweep_id: str) -> list[CancelledJob]:
        from orchestrator.records import CancelledJob

        return [CancelledJob.from_row(r, already_ended=False) for r in self.orch.cancel_sweep(sweep_id)]

    def cost(self, by: str = "target", since: Optional[str] = None) -> CostReport:
        return self.orch.cost_report(by, since)

    # Schedules on this machine's store: the ones an `orch serve` using it runs. The store's
    # user may change any of them, as with `orch token` (service/schedule_rules.py).

    def schedules(self) -> list[Schedule]:
        if not store_exists(self.settings):  # never create the store just to say it is empty
            return []
        return [Schedule.model_validate(s) for s in self.orch.schedules()]

    def _with_schedules(self, sched_id: str) -> Orch:
        if not store_exists(self.settings):
            raise NotFound(f"no schedule {sched_id!r}: there is no job store at "
                           f"{self.settings.home} yet", "`orch schedule list` shows the schedules")
        return self.orch

    def schedule(self, sched_id: str) -> Schedule:
        return Schedule.model_validate(self._with_schedules(sched_id).schedule(sched_id))

    def pause_schedule(self, sched_id: str, paused: bool = True) -> Schedule:
        return Schedule.model_validate(self._with_schedules(sched_id).pause_schedule(sched_id, paused))

    def remove_schedule(self, sched_id: str) -> Schedule:
        return Schedule.model_validate(self._with_schedules(sched_id).remove_schedule(sched_id))
