"""A run's metrics (`JobRow.metrics`, a job record's `metrics`): what orch derived, typed.

Orch derives a run's outcome, verdict, device figures, phases and scaling from its log
(service/run_metrics.py); the job's own reports add numbers under names its code chooses
(`loss`, `samples_per_sec`, ...). `RunMetrics` names what orch derives and keeps the
reported names as they came (`reported()`, `number(name)`).

`RunMetrics` holds the stored dict as it is: the API serves a stored row's metrics byte for
byte, and a listing of many jobs pays for a dict. Each derived record is read from it when
asked, leniently: a row written by an older orch, or a figure that a job's code printed,
never fails a read. A record that does not fit reads as None (`{"verdict": "old-string"}`:
no verdict); within one, a key that does not fit is left out and a key no field names is
kept, and its keys are shown in the order they came (`run_settings` is printed as stored).
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    RootModel,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    model_serializer,
    model_validator,
)

Num = Union[StrictInt, StrictFloat]  # a JSON number as it was written (3 stays 3, no bool)


@functools.cache
def _adapter(kind: Any) -> TypeAdapter:
    return TypeAdapter(kind)  # built once a type: building one takes milliseconds


class Kept(BaseModel):
    """A record read leniently and shown as it came: a key that does not fit its field is
    dropped (a whole record that is no JSON object fails, for its holder to drop), unknown
    keys are kept, and keys are shown in the order they were read, then those set after."""
    model_config = ConfigDict(extra="allow")
    _order: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _lenient(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, cls):
            return data
        if isinstance(data, dict):
            data = dict(data)
            for _ in range(len(data) + 1):  # each failure drops one key at least
                try:
                    made = handler(data)
                    break
                except ValidationError as e:
                    bad = {err["loc"][0] for err in e.errors() if err["loc"]}
                    if not bad & set(data):
                        raise  # a required field missing: the record is no such record
                    data = {k: v for k, v in data.items() if k not in bad}
            made._order = list(data)
            return made
        return handler(data)  # no JSON object: fails, and its holder drops it

    @model_serializer(mode="wrap")
    def _as_read(self, dump: Any) -> dict[str, Any]:
        out = dump(self)
        shown = [k for k in self._order if k in self.model_fields_set or
                 k in (self.model_extra or {})]
        shown += [k for k in [*self.model_fields_set, *(self.model_extra or {})] if k not in shown]
        return {k: out[k] for k in shown if k in out}

    def __bool__(self) -> bool:  # as its dict would be: empty is false
        return bool(self.model_fields_set or self.model_extra)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_dict(self) -> dict[str, Any]:
        """As Python values (a NaN stays a float): what orch's own code builds on."""
        return self.model_dump()


class Verdict(Kept):
    """What limits the run and what to change (jobs/verdict.py `diagnose`)."""
    kind: StrictStr
    reasons: list[StrictStr] = []
    advice: list[StrictStr] = []
    scaling_efficiency: Optional[Num] = None


class DeviceSummary(Kept):
    """The run's devices over its whole run, all workers (jobs/telemetry.py `combine`)."""
    source: Optional[StrictStr] = None  # "nvml" for GPUs; else the CPU's figures
    device: Optional[StrictStr] = None
    mean_util: Optional[Num] = None
    p10_util: Optional[Num] = None
    peak_mem_gb: Optional[Num] = None
    mem_total_gb: Optional[Num] = None
    workers: Optional[Num] = None
    seconds: Optional[Num] = None
    energy_wh: Optional[Num] = None
    energy_basis: Optional[StrictStr] = None


class Telemetry(Kept):
    """Each worker's device figures at the run's end, and their summary."""
    workers: Optional[dict[str, Any]] = None
    summary: Optional[DeviceSummary] = None


class WorkerPoint(Kept):
    """One worker's latest device figures while the run goes on (jobs/telemetry.py)."""
    source: Optional[StrictStr] = None
    util: Optional[Num] = None
    mem_gb: Optional[Num] = None
    power_w: Optional[Num] = None


class RunSettings(Kept):
    """What the run chose at its start (the `worker_setup` event, precision, loader)."""
    gpu_name: Optional[StrictStr] = None
    precision: Optional[StrictStr] = None


class IdleNote(Kept):
    """The runner found every device idle (utilization_policy)."""
    reason: Optional[StrictStr] = None
    action: Optional[StrictStr] = None


class Scaling(Kept):
    """With N workers, throughput against one worker's."""
    workers: Num
    one_worker_samples_per_sec: Num
    speedup: Num
    efficiency: Num


class Failure(Kept):
    """A failed run's last error lines and orch's hint (service/why_failed.py)."""
    lines: list[StrictStr] = []
    hint: Optional[StrictStr] = None
    error: Optional[StrictStr] = None


class Stopped(Kept):
    """The run stopped itself when its budget was spent."""
    epoch: Any = None
    detail: Any = None


class Dropped(Kept):
    """Event lines of its log that were malformed: how many, and the first few reasons."""
    count: StrictInt
    first: list[Any] = []


class RunMetrics(RootModel[dict[str, Any]]):
    """A run's metrics: what orch derived (the typed properties) and what the job reported
    (the rest, `reported()`). Built from its log's events by service/run_metrics.py.

    It holds the stored dict as it is (what the API serves, byte for byte, and what a
    listing of many jobs reads at the cost of a dict) and reads each derived record from
    it when asked, leniently (records that do not fit read as None)."""
    root: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _a_dict(cls, data: Any) -> Any:
        return data if isinstance(data, (dict, RunMetrics)) else {}  # None, a list: nothing

    @classmethod
    def read(cls, raw: Any) -> RunMetrics:
        """A stored row's metrics (a dict as any orch version wrote it, or None)."""
        if isinstance(raw, RunMetrics):
            return raw
        return cls.model_validate(raw if isinstance(raw, dict) else {})

    def _as(self, name: str, kind: Any) -> Any:
        raw = self.root.get(name)
        if raw is None:
            return None
        try:
            return _adapter(kind).validate_python(raw)
        except ValidationError:
            return None

    @property
    def verdict(self) -> Optional[Verdict]:
        return self._as("verdict", Verdict)

    @property
    def telemetry(self) -> Optional[Telemetry]:
        return self._as("telemetry", Telemetry)

    @property
    def device_now(self) -> Optional[dict[str, WorkerPoint]]:
        return self._as("device_now", dict[str, WorkerPoint])

    @property
    def run_settings(self) -> Optional[RunSettings]:
        return self._as("run_settings", RunSettings)

    @property
    def utilization(self) -> Optional[IdleNote]:
        return self._as("utilization", IdleNote)

    @property
    def phases(self) -> Optional[dict[str, float]]:
        return self._as("phases", dict[str, Num])

    @property
    def scaling(self) -> Optional[Scaling]:
        return self._as("scaling", Scaling)

    @property
    def failure(self) -> Optional[Failure]:
        return self._as("failure", Failure)

    @property
    def stopped(self) -> Optional[Stopped]:
        return self._as("stopped", Stopped)

    @property
    def dropped_events(self) -> Optional[Dropped]:
        return self._as("dropped_events", Dropped)

    @property
    def wall_s(self) -> Optional[float]:
        """The runner's own clock: training, no start-up."""
        return self._as("wall_s", Num)

    @property
    def checkpoint(self) -> Any:
        return self.root.get("checkpoint")

    def reported(self) -> dict[str, Any]:
        """What the job's reports said, by the names its code chose."""
        return {k: v for k, v in self.root.items() if k not in DERIVED}

    def number(self, name: str) -> Optional[float]:
        """A reported figure, where it is a number (a job may report anything)."""
        v = self.root.get(name)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def summary(self) -> Optional[DeviceSummary]:
        """The devices' summary over the whole run, None before its end."""
        tel = self.telemetry
        return tel.summary if tel else None

    def __bool__(self) -> bool:  # as its dict would be: empty is false
        return bool(self.root)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_dict(self) -> dict[str, Any]:
        """The stored dict, a copy: what orch's own code builds on."""
        return dict(self.root)


# What orch derives (RunMetrics' properties, and the last report's index): never a reported name.
DERIVED = frozenset(("verdict", "telemetry", "device_now", "run_settings", "utilization",
                     "phases", "scaling", "failure", "stopped", "dropped_events", "wall_s",
                     "reports", "checkpoint"))


# What planning learns from a past run (decision.models.PastRun.from_row reads no other key
# of its metrics): the store keeps these beside the whole (store/jobs.py, `learned_json`), so
# that a plan reads a team's 2,000 runs without their telemetry series.
LEARNED = ("wall_s", "samples_per_sec", "data_fraction")


def learned_part(metrics: Any) -> dict[str, Any]:
    """The part of a run's metrics that planning reads, as stored: `LEARNED` and
    `run_settings.gpu_name` (read as RunMetrics reads it). Anything but a dict reads as none."""
    read = RunMetrics.read(metrics)
    out = {k: read.root[k] for k in LEARNED if k in read.root}
    settings = read.run_settings
    if settings is not None and settings.gpu_name is not None:
        out["run_settings"] = RunSettings(gpu_name=settings.gpu_name).to_dict()
    return out
