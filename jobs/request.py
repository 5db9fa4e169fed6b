"""What orch asks the runner to do: one typed `RunRequest`, written by orch and read here.

orch (orchestrator/service/launch_spec.py) builds a RunRequest for every `train:` job and puts its JSON
in the job's ORCH_RUN variable; the runner (jobs/runner.py) reads it back with
`RunRequest.from_json`, which refuses a missing, unknown or ill-typed field by name rather
than failing later inside a worker. The same definition on both sides: this module
imports only the standard library, since it runs on the target under that Python.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Optional, TypeGuard, Union

from .telemetry import IdlePolicy

ENV_VAR = "ORCH_RUN"
AUTO = "auto"


class BadRequest(ValueError):
    """ORCH_RUN is not a run request this runner understands."""


@dataclass(frozen=True)
class Budget:
    """What the run may cost: it stops itself after a checkpoint once `spent_usd` plus
    `price_per_hour_usd` x the hours since `t0` reach `limit_usd`."""
    limit_usd: float
    price_per_hour_usd: float
    what: str = "budget"  # which limit: "budget.max_cost" or "monthly_budget"
    spent_usd: float = 0.0  # before the run started (a cloud VM's start-up)
    t0: Optional[float] = None  # epoch s; None: when the runner starts


@dataclass(frozen=True)
class RunRequest:
    """One `train:` job's run, as orch placed it."""
    job_id: str
    target: str  # the training loop: "module:function" or a built-in job's name
    num_workers: int = 1
    # Elastic (scaling.num_workers: {min, max}): started on what is free, at least
    # num_workers, grown up to this many as more frees; None: always num_workers.
    max_workers: Optional[int] = None
    run_name: Optional[str] = None  # None: the job id
    config: dict = field(default_factory=dict)  # the loop's own config (train.config)
    use_gpu: Union[bool, str] = AUTO  # True, False or "auto" (a GPU per worker, if the cluster has them)
    precision: str = AUTO  # auto, fp32, bf16 or fp16
    loader_workers: Union[int, str] = AUTO
    pin_memory: Union[bool, str] = AUTO
    # The CPUs each worker may use (resources.cpus / workers); None: this node's CPUs
    # shared among the workers on it.
    cpus_per_worker: Optional[int] = None
    placement: str = "pack"  # pack or spread
    storage_path: Optional[str] = None  # None: Ray's default on the cluster
    s3_endpoint_url: Optional[str] = None
    num_to_keep: int = 2
    max_failures: int = 0
    budget: Optional[Budget] = None
    telemetry_interval_s: float = 5.0  # how often each worker reads its device (jobs/telemetry.py)
    # utilization_policy (jobs/idle_policy.py): warn about or stop a run left idle
    utilization_policy: Optional[IdlePolicy] = None
    telemetry_point_s: float = 30.0  # each worker's live device point: its mean over this long

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunRequest:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise BadRequest(f"{ENV_VAR} is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise BadRequest(f"{ENV_VAR} is not a JSON object")
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict) -> RunRequest:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BadRequest(f"{ENV_VAR} has fields this runner does not know: {', '.join(unknown)} "
                             "(orch and the runner on the target differ in version)")
        missing = [n for n in ("job_id", "target") if n not in data]
        if missing:
            raise BadRequest(f"{ENV_VAR} lacks {', '.join(missing)}")
        data = dict(data)
        if data.get("budget") is not None:
            budget = data["budget"]
            if not isinstance(budget, dict):
                raise BadRequest(f"{ENV_VAR}.budget is not an object")
            bad = sorted(set(budget) - {f.name for f in dataclasses.fields(Budget)})
            if bad:
                raise BadRequest(f"{ENV_VAR}.budget has unknown fields: {', '.join(bad)}")
            data["budget"] = Budget(**budget)
        if data.get("utilization_policy") is not None:
            data["utilization_policy"] = _policy(data["utilization_policy"])
        req = cls(**data)
        req._check()
        return req

    def _check(self) -> None:
        def bad(name: str, want: str) -> BadRequest:
            return BadRequest(f"{ENV_VAR}.{name} is {getattr(self, name)!r}; want {want}")

        if not isinstance(self.job_id, str) or not self.job_id:
            raise bad("job_id", "a job id")
        if not isinstance(self.target, str) or not self.target:
            raise bad("target", "module:function or a built-in job")
        for name in ("num_workers", "num_to_keep"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise bad(name, "a positive integer")
        if self.max_workers is not None and (not _is_int(self.max_workers)
                                             or self.max_workers < self.num_workers):
            raise bad("max_workers", "an integer >= num_workers, or null")
        if not _is_int(self.max_failures) or self.max_failures < 0:
            raise bad("max_failures", "an integer >= 0")
        if self.cpus_per_worker is not None and (not _is_int(self.cpus_per_worker) or self.cpus_per_worker < 1):
            raise bad("cpus_per_worker", "a positive integer or null")
        for name in ("use_gpu", "pin_memory"):
            if not isinstance(getattr(self, name), bool) and getattr(self, name) != AUTO:
                raise bad(name, "true, false or \"auto\"")
        if not (_is_int(self.loader_workers) and self.loader_workers >= 0) and self.loader_workers != AUTO:
            raise bad("loader_workers", "an integer >= 0 or \"auto\"")
        if self.precision not in (AUTO, "fp32", "bf16", "fp16"):
            raise bad("precision", "auto, fp32, bf16 or fp16")
        if self.placement not in ("pack", "spread"):
            raise bad("placement", "pack or spread")
        if not isinstance(self.config, dict):
            raise bad("config", "an object")
        if isinstance(self.telemetry_interval_s, bool) or not isinstance(self.telemetry_interval_s, (int, float)) \
                or not 0.1 <= self.telemetry_interval_s <= 3600:
            raise bad("telemetry_interval_s", "seconds between 0.1 and 3600")
        policy = self.utilization_policy
        if policy is not None and not (
                _is_number(policy.min_utilization) and 0 < policy.min_utilization <= 100
                and _is_number(policy.window_minutes) and policy.window_minutes > 0
                and policy.action in ("warn", "stop")):
            raise bad("utilization_policy", "min_utilization in (0, 100], window_minutes > 0 and "
                                            "action warn or stop")
        if isinstance(self.telemetry_point_s, bool) or not isinstance(self.telemetry_point_s, (int, float)) \
                or not 1 <= self.telemetry_point_s <= 3600:
            raise bad("telemetry_point_s", "seconds between 1 and 3600")
        for name in ("run_name", "storage_path", "s3_endpoint_url"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise bad(name, "a string or null")

    @property
    def name(self) -> str:
        """The run's name under storage_path: fixed per run, so a restarted worker group or
        a later job resuming it finds its checkpoints."""
        return self.run_name or self.job_id


@dataclass
class WorkerOptions:
    """What each Ray Train worker gets from the runner, beside the loop's own config."""
    job_id: str
    target: str
    precision: str = AUTO
    loader_workers: Union[int, str] = AUTO
    pin_memory: Union[bool, str] = AUTO
    cpus_per_worker: Optional[int] = None
    budget: Optional[Budget] = None
    env: Any = None  # secret_env.Hidden: the job's secret values, printed by name only
    # In the runner host (jobs/host.py), whose processes outlive a job: the job's log, which
    # the worker writes to, and its working_dir on this node, where it runs.
    log_path: Optional[str] = None
    cwd: Optional[str] = None
    telemetry_interval_s: float = 5.0
    utilization_policy: Optional[IdlePolicy] = None
    utilization_board: Optional[str] = None  # the run's board (jobs/idle_policy.py)
    telemetry_point_s: float = 30.0

    @classmethod
    def of(cls, req: RunRequest, budget: Optional[Budget], env: Any = None) -> WorkerOptions:
        return cls(job_id=req.job_id, target=req.target, precision=req.precision,
                   loader_workers=req.loader_workers, pin_memory=req.pin_memory,
                   cpus_per_worker=req.cpus_per_worker, budget=budget, env=env,
                   telemetry_interval_s=req.telemetry_interval_s,
                   utilization_policy=req.utilization_policy,
                   telemetry_point_s=req.telemetry_point_s)


def _policy(raw: Any) -> IdlePolicy:
    fields = {f.name for f in dataclasses.fields(IdlePolicy)}
    if not isinstance(raw, dict) or set(raw) - fields or "min_utilization" not in raw \
            or "window_minutes" not in raw:
        raise BadRequest(f"{ENV_VAR}.utilization_policy is {raw!r}; want an object of "
                         f"{', '.join(sorted(fields))}")
    return IdlePolicy(**raw)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)
