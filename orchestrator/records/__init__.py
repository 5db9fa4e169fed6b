"""A job's public record: the one shape `orch status --json`, the REST API and the status page show.

The store keeps more about a job than it shows: its `info` holds what orch's own parts need
(who submitted it and whether that process lives, which server launches it, the digests
that redact its secrets from a log). `JobRecord.from_row` is the only way from a store row
to what a user or a token holder sees; it names each public field, so anything new in
`info` stays private until it is added here (and `INTERNAL_INFO` says what is kept back).
"""

from __future__ import annotations

import time
from typing import Any, Optional, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from orchestrator.records.cost import CloudBill, CostEntry
from orchestrator.records.metrics import RunMetrics
from orchestrator.records.placement import PlacedOffer, Placement
from orchestrator.records.schedule import ScheduleRow
from orchestrator.records.stored_spec import StoredSpec

# What `info` holds for orch alone, and why it is not shown.
INTERNAL_INFO = {
    "submitter": "the submitting process (pid, host, start time): only to tell whether it lives",
    "launcher": "the orch serve process that took a queued job for launching",
    "held_by": "the orch serve replica that holds a queued job's given secret values",
    "env_secrets": "which secrets the server's environment supplies (restored on a restart)",
    "secret_salt": "with the digests below: recognizes secret values in a log",
    "secret_hmacs": "HMAC-SHA256 digests of the secret values (redact.py)",
    "secret_lengths": "the lengths of those values: where a log is searched for them",
    "secret_heads": "keyed tags of those values' first characters: where a search may start",
    "secret_digests": "salted SHA-256 digests of the secret values, from older orch versions",
    "offers": "the cloud ledger's price list (the decision's alternatives show the offers)",
    "budget_stop": "why orch stopped the job; the job's message says it",
    "launched_at": "when its backend took it (orch's clock): one end of its phases",
    "placed_at": "when a queued job was last placed again (its expected start counts from it)",
    "event_key": "the key its runner signs its result and verdict with (jobs/events.py): "
                 "shown, it would let the job's own code forge them",
}


def iso(ts: Optional[float]) -> Optional[str]:
    """Epoch seconds as ISO 8601 UTC, as every record shows a time."""
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


class _Public(BaseModel):
    model_config = ConfigDict(extra="forbid")


R = TypeVar("R", bound="JobRecord")  # from_row's answer: the class it is called on


class RunInfo(_Public):
    """What a job's launch and its backend recorded; None where nothing was."""
    queued: bool = Field(default=False, description="waiting in orch serve's queue, not launched yet")
    upload: Optional[str] = Field(default=None, description="the uploaded workdir it runs from")
    schedule: Optional[str] = Field(default=None, description="the cron schedule that queued it")
    slot: Optional[str] = Field(default=None, description="the schedule's slot (UTC) it runs for")
    pipeline: Optional[str] = Field(default=None, description="the pipeline it is a stage of")
    stage: Optional[int] = Field(default=None, description="its place in the pipeline, from 1")
    stages: Optional[int] = Field(default=None, description="how many stages the pipeline has")
    after: Optional[str] = Field(default=None, description="the stage (job id) that must "
                                 "succeed before it starts")
    preemptions: Optional[int] = Field(default=None, description="times it ended by the "
                                       "preemption contract (exit 75) and was run again")
    earlier_runs: Optional[list[str]] = Field(default=None, description="the backend's ids of "
                                              "its runs before the last (preemptions)")
    sweep: Optional[str] = Field(default=None, description="the sweep (its id) it is a run of")
    sweep_name: Optional[str] = Field(default=None, description="the sweep's job file's name")
    sweep_run: Optional[int] = Field(default=None, description="its place in the sweep, from 1")
    sweep_runs: Optional[int] = Field(default=None, description="how many runs the sweep has")
    sweep_values: Optional[str] = Field(default=None, description="its values, e.g. lr=0.01")
    sweep_metric: Optional[str] = Field(default=None, description="what the best run is judged by")
    sweep_mode: Optional[str] = Field(default=None, description="min or max: which is best")
    group: Optional[str] = Field(default=None, description="the job group it is a task of")
    task: Optional[str] = Field(default=None, description="its task's name in the job group")
    primary: Optional[bool] = Field(default=None, description="whether the group ends with it "
                                    "(a primary task) or is stopped after it (an auxiliary one)")
    termination_delay_s: Optional[float] = Field(default=None, description="how long an "
                                                 "auxiliary task may outlive the primary ones")
    group_jobs: Optional[dict[str, str]] = Field(default=None, description="the group's tasks' "
                                                 "job ids, by task name")
    entrypoint: Optional[str] = Field(default=None, description="the command its backend runs")
    storage_path: Optional[str] = Field(default=None, description="where its checkpoints go")
    run_name: Optional[str] = Field(default=None, description="its run's folder under storage_path")
    backend_start: Optional[float] = Field(default=None, description="start by the backend's clock (epoch s)")
    backend_end: Optional[float] = Field(default=None, description="end by the backend's clock (epoch s)")
    sky_request_id: Optional[str] = Field(default=None, description="SkyPilot's launch request")
    sky_status: Optional[str] = Field(default=None, description="SkyPilot's managed-job status")
    sky_job_id: Optional[Union[int, str]] = Field(default=None, description="SkyPilot's managed-job id")
    infra: Optional[str] = Field(default=None, description="where SkyPilot runs it (cloud/region)")
    ledger: Optional[CloudBill] = Field(default=None, description="a cloud job's launches and "
                                        "billed hours (orchestrator.decision.cloud_bill)")
    cost: Optional[CostEntry] = Field(default=None, description="its `orch cost` line, kept when "
                                           "it ended (orchestrator.decision.job_ledger.entry)")


class JobInfo(RunInfo):
    """All a job's `info` holds, public (RunInfo) and private (INTERNAL_INFO): the one
    definition of its keys. `JobRow.info` holds a store row's; `with_info(rec, ...)` is
    the dict a store update writes. A key an other orch version wrote is kept as it is."""
    model_config = ConfigDict(extra="allow")
    submitter: Optional[dict[str, Any]] = None
    launcher: Optional[str] = None
    held_by: Optional[str] = None
    env_secrets: list[str] = Field(default_factory=list)
    secret_salt: str = ""
    secret_hmacs: list[str] = Field(default_factory=list)
    secret_lengths: list[int] = Field(default_factory=list)
    secret_heads: list[str] = Field(default_factory=list)
    secret_digests: list[str] = Field(default_factory=list)
    offers: list[Any] = Field(default_factory=list)
    budget_stop: Optional[str] = None
    launched_at: Optional[float] = None
    placed_at: Optional[float] = None  # a re-placed queued job's new decision's time
    event_key: str = ""  # "": recorded before keys, its log's events read as they were


class JobRow(BaseModel):
    """A job as the store keeps it: every column, the JSON ones as Python values, its
    `info` typed. What the service, the server and the decision core read; a user sees
    `JobRecord.from_row(row)` of it."""
    model_config = ConfigDict(extra="forbid")
    id: str
    name: str
    status: str
    kind: Optional[str] = None
    target: Optional[str] = None
    fingerprint: Optional[str] = None
    spec: dict[str, Any] = Field(default_factory=dict)
    source_file: Optional[str] = None
    decision: Optional[Placement] = None
    backend_id: Optional[str] = None
    address: Optional[str] = None
    log_path: Optional[str] = None
    metrics: RunMetrics = Field(default_factory=RunMetrics)
    info: JobInfo = Field(default_factory=JobInfo)
    message: Optional[str] = None
    cancel_requested: bool = False
    idempotency_key: Optional[str] = None
    created_at: float = 0.0
    updated_at: float = 0.0
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    owner: Optional[str] = None
    priority: int = 0

    @property
    def placed_on(self) -> str:
        """Its target. Every job orch records has one; a row without is not orch's."""
        if not self.target:
            from orchestrator.base.errors import StoreError

            raise StoreError(f"job {self.id} has no target in the store",
                             "`orch doctor` checks the store")
        return self.target

    @property
    def choice(self) -> Optional[PlacedOffer]:
        """The offer its decision chose (None when it has none)."""
        return self.decision.choice if self.decision else None

    @property
    def stored(self) -> StoredSpec:
        """Its job file, as orch's decisions read it (records.stored_spec)."""
        return StoredSpec.read(self.spec)


def with_info(rec: JobRow, drop: tuple[str, ...] = (), **changes: Any) -> dict:
    """The row's `info` with `changes` made (checked against JobInfo) and `drop` removed,
    as a dict for `store.update(..., info=...)`: what was never set stays unwritten."""
    current = rec.info.model_dump(mode="json", exclude_unset=True)
    merged = {k: v for k, v in {**current, **changes}.items() if k not in drop}
    JobInfo.model_validate(merged)  # a wrong type fails here, before it is stored
    return merged


class CloudCost(_Public):
    """What a cloud job's launches and recoveries really cost."""
    usd: float
    billed_hours: float
    recoveries: int
    launches: list[dict[str, Any]]


class JobRecord(_Public):
    """A job as `orch status --json` and `GET /v1/jobs` show it. Times are ISO 8601 UTC."""
    id: str
    name: str
    status: str = Field(description="PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED")
    kind: Optional[str] = Field(default=None, description="exploratory or steady")
    target: Optional[str] = Field(default=None, description="local, onprem or cloud")
    created_at: Optional[str] = None
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    message: Optional[str] = None
    metrics: RunMetrics = Field(default_factory=RunMetrics, description="what the run reported "
                                "and what orch derived from its log (records.metrics)")
    fingerprint: Optional[str] = None
    backend_id: Optional[str] = None
    log_path: Optional[str] = None
    source_file: Optional[str] = None
    run: RunInfo = Field(default_factory=RunInfo)
    decision: Optional[Placement] = Field(default=None, description="the plan it was placed by "
                                          "(the `orch plan --json` shape)")
    owner: Optional[str] = Field(default=None, description="the token name that submitted it")
    priority: int = 0
    cost: Optional[CloudCost] = Field(default=None, description="a cloud job's real cost; None elsewhere")

    @classmethod
    def from_row(cls: type[R], rec: JobRow, **extra: Any) -> R:
        """The public record of a store row (`Store.get` and friends); `extra`: the fields a
        subclass adds (history, warning, ...)."""
        ledger = rec.info.ledger
        cost = None
        if ledger:
            cost = CloudCost(usd=ledger.cost_usd, billed_hours=ledger.billed_hours,
                             recoveries=ledger.recoveries,
                             launches=[x.model_dump(mode="json", exclude_unset=True) for x in ledger.launches])
        public = rec.info.model_dump(include=set(RunInfo.model_fields), exclude_unset=True)
        return cls(
            id=rec.id, name=rec.name, status=rec.status, kind=rec.kind, target=rec.target,
            created_at=iso(rec.created_at), started_at=iso(rec.started_at),
            finished_at=iso(rec.finished_at), message=rec.message, metrics=rec.metrics,
            fingerprint=rec.fingerprint, backend_id=rec.backend_id, log_path=rec.log_path,
            source_file=rec.source_file, run=RunInfo(**public), decision=rec.decision,
            owner=rec.owner, priority=rec.priority, cost=cost, **extra)

    def to_json(self) -> dict:
        return self.model_dump(mode="json")


class Event(_Public):
    """One change of a job's state, or news in the same state."""
    at: str
    status: str
    message: Optional[str] = None


class JobDetail(JobRecord):
    """One job (`orch status ID --json`, `GET /v1/jobs/{id}`): the record and its history."""
    history: list[Event]
    warning: Optional[str] = Field(default=None, description="why the record may be stale (its "
                                   "backend did not answer)")

    @classmethod
    def from_history(cls, rec: JobRow, history: list[dict],
                     warning: Optional[str] = None) -> JobDetail:
        return cls.from_row(rec, history=[Event(at=h["at"], status=h["status"],
                                                message=h["message"]) for h in history],
                            warning=warning)


class SubmittedJob(JobRecord):
    """The answer to a submit: the record, and whether its idempotency key was seen before."""
    existing: bool = False


class CancelledJob(JobRecord):
    """The answer to a cancel: the record, and whether it had ended before."""
    already_ended: bool = False


class SubmittedPipeline(BaseModel):
    """The answer to submitting a pipeline: each stage's record, in order."""
    pipeline: str
    stages: list[SubmittedJob]


class SubmittedSweep(BaseModel):
    """The answer to submitting a sweep: each run's record, in the file's order."""
    sweep: str
    name: str
    runs: list[SubmittedJob]


class SubmittedGroup(BaseModel):
    """The answer to submitting a job group: each task's record, in the file's order."""
    group: str
    tasks: list[SubmittedJob]




class ScheduleEvent(BaseModel):
    """One line of a schedule's log."""
    at: Optional[str] = None
    slot: Optional[str] = None
    job_id: Optional[str] = None
    message: Optional[str] = None


class Schedule(BaseModel):
    """A cron schedule as `orch schedule ... --json` and `GET /v1/schedules` show it (no job
    file text): `log` only where its log was asked for, `unchanged` only on a pause or
    resume that found it in that state already, `existing` only on a registration that
    found it registered under its idempotency key. Times are ISO 8601 UTC."""
    id: str
    name: str
    owner: Optional[str] = None
    cron: str
    priority: int = 0
    source_file: Optional[str] = None
    created_at: Optional[str] = None
    next_at: Optional[str] = None
    last_slot: Optional[str] = None
    paused: bool = False
    log: Optional[list[ScheduleEvent]] = None
    unchanged: bool = False
    existing: bool = False  # a registration whose idempotency key named it already

    @model_serializer(mode="wrap")
    def _json(self, dump: Any) -> dict[str, Any]:
        out = dump(self)
        if self.log is None:
            out.pop("log", None)
        for flag in ("unchanged", "existing"):
            if not getattr(self, flag):
                out.pop(flag, None)
        return out

    @classmethod
    def from_row(cls, row: ScheduleRow, log: Optional[list[dict]] = None,
                 **flags: bool) -> Schedule:
        """What a user sees of a stored schedule (`Store.schedule`): no job file text; `log`
        its recent lines (`Store.schedule_events`), shown only where given; `flags`:
        `existing`, `unchanged`."""
        return cls(id=row.id, name=row.name, owner=row.owner, cron=row.cron,
                   priority=row.priority, source_file=row.source_file,
                   created_at=iso(row.created_at), next_at=iso(row.next_at),
                   last_slot=iso(row.last_slot), paused=row.paused,
                   log=None if log is None else [ScheduleEvent(**e) for e in log], **flags)

    def to_json(self) -> dict:
        return self.model_dump(mode="json")


class Registered(BaseModel):
    """A job file with `schedule.cron`, submitted to `orch serve`: the schedule it registered."""
    model_config = ConfigDict(extra="forbid")
    schedule: Schedule
