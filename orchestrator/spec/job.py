"""The whole job file: SkyPilot's common task keys, orch's sections, and what callers ask
of a loaded spec (its env strings, its secrets, its workdir, errors located in the file)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import ConfigDict, Field, PositiveInt, PrivateAttr, field_validator, model_validator

from orchestrator.base.errors import SpecError
from orchestrator.base.inputs import clip
from orchestrator.spec.base import Strict, plain
from orchestrator.spec.document import SourceMap
from orchestrator.spec.resources import CLOUD_ONLY, Resources
from orchestrator.spec.sections import (
    BudgetSection,
    Checkpoint,
    Data,
    EstimateSection,
    PlacementSection,
    Scaling,
    ScheduleSection,
    Train,
    UtilizationPolicy,
)
from orchestrator.spec.sweep import Sweep

# SkyPilot's task-level keys for a cloud VM, passed to its task as they are: `config` (its
# config overrides for this task), `inputs`/`outputs` (data sizes its optimizer weighs),
# `volumes` (SkyPilot volumes, which only a cloud has: they pin the job there).
TASK_KEYS = ("config", "inputs", "outputs", "volumes")
TASK_CLOUD_ONLY = {"volumes": "SkyPilot volumes"}

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# orch's own keys; the rest of a job file is SkyPilot's task, checked by its schema.
ORCH_KEYS = ("train", "scaling", "precision", "data", "schedule", "budget", "placement",
             "checkpoint", "estimate", "utilization_policy", "sweep")


class GitWorkdir(Strict):
    """SkyPilot's `workdir: {url, ref}`: a git repository at a branch, tag or commit."""

    url: str
    ref: Optional[str] = None
    # orch's, not SkyPilot's (its schema refuses the key in a file): the commit `ref` named
    # when the job was checked, so every launch of it runs the same code.
    commit: Optional[str] = None

    def for_skypilot(self) -> dict[str, str]:
        ref = self.commit or self.ref
        return {"url": self.url, **({"ref": ref} if ref else {})}

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        if not v.strip() or v.lstrip().startswith("-"):
            raise ValueError(f"{clip(v)} is not a git URL: write e.g. https://github.com/org/repo.git")
        if re.match(r"^[a-z][a-z0-9+.-]*://[^/@]*:[^/@]*@", v, re.IGNORECASE):
            # kept with the job's record and shown by orch status: no place for a credential
            raise ValueError("the URL holds a password or token, which orch would keep with the "
                             "job's record: drop it and let git find it (a credential helper, "
                             "or an SSH key)")
        return v

    @field_validator("ref")
    @classmethod
    def _check_ref(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and (not v.strip() or v.startswith("-") or any(c.isspace() for c in v)):
            raise ValueError(f"{clip(v)} is not a git branch, tag or commit")
        return v


class JobSpec(Strict):
    # SkyPilot's other task keys (event_callback, volume_mounts, ...), which its schema
    # accepted when the file was read, are kept as extras and passed to its task unchanged.
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    # SkyPilot's common task keys.
    name: Optional[str] = None
    workdir: Union[str, GitWorkdir, None] = None  # a folder, or a git repository
    num_nodes: PositiveInt = 1
    resources: Resources = Field(default_factory=Resources)
    envs: dict[str, Union[str, int, float, bool, None]] = Field(default_factory=dict)
    # As in SkyPilot: passed to the job like envs, stored and shown only redacted; a null
    # value is read from the submitting shell's environment.
    secrets: dict[str, Optional[str]] = Field(default_factory=dict)
    file_mounts: dict[str, Union[str, dict[str, Any]]] = Field(default_factory=dict)
    setup: Optional[str] = None
    run: Optional[str] = None
    # SkyPilot's task keys for a cloud VM, passed to its task unchanged (TASK_KEYS).
    config: Optional[dict[str, Any]] = None
    inputs: Optional[dict[str, Any]] = None
    outputs: Optional[dict[str, Any]] = None
    volumes: Optional[dict[str, Any]] = None
    # orch's keys.
    train: Optional[Train] = None
    scaling: Scaling = Field(default_factory=Scaling)
    precision: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    data: Data = Field(default_factory=Data)
    schedule: ScheduleSection = Field(default_factory=ScheduleSection)
    budget: BudgetSection = Field(default_factory=BudgetSection)
    placement: PlacementSection = Field(default_factory=PlacementSection)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    estimate: Optional[EstimateSection] = None
    utilization_policy: Optional[UtilizationPolicy] = None
    sweep: Optional[Sweep] = None  # spec/sweep.py: runs of this file with other values

    # Set by the loader; None for a spec built in code (errors then name no line).
    _source: Optional[SourceMap] = PrivateAttr(default=None)

    @field_validator("file_mounts", mode="before")
    @classmethod
    def _check_file_mounts(cls, v: Any) -> Any:
        return plain(v) if isinstance(v, dict) else v

    @field_validator("workdir")
    @classmethod
    def _check_workdir(cls, v: Union[str, GitWorkdir, None]) -> Union[str, GitWorkdir, None]:
        if not isinstance(v, str):
            return v
        try:
            Path(v).expanduser()
        except RuntimeError:  # ~user for a user that does not exist
            raise ValueError(f"{clip(v)}: no such user's home directory") from None
        return v

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _NAME_RE.match(v):
            raise ValueError(f"{v!r}: use letters, digits, '-', '_' or '.', at most 63 characters")
        return v

    @field_validator("envs", "secrets")
    @classmethod
    def _check_envs(cls, v: dict[str, Any]) -> dict[str, Any]:
        for k in v:
            if not _ENV_NAME_RE.match(k):
                raise ValueError(f"{k!r} is not an environment variable name")
        return v

    @model_validator(mode="after")
    def _train_or_run(self) -> JobSpec:
        if self.train is None and self.run is None:
            raise ValueError("nothing to run: give 'train:' (a built-in job or entrypoint) or "
                             "'run:' (a shell command); a SkyPilot file with neither only sets "
                             "up a cluster, which orch does not keep")
        if self.train is not None and self.run is not None:
            raise ValueError("give one of 'train:' (a built-in job or entrypoint) or 'run:' "
                             "(a shell command), not both")
        if self.utilization_policy is not None and self.train is None:
            raise ValueError("utilization_policy needs 'train:': orch's runner measures a train "
                             "job's devices, and a 'run:' command has no runner; drop the key, or "
                             "run the loop as train: {entrypoint: 'module:function'}")
        return self

    def extra_task_keys(self) -> dict[str, Any]:
        """SkyPilot's task keys orch does not read (its schema checked them)."""
        return dict(self.model_extra or {})

    def task_keys(self) -> dict[str, Any]:
        """SkyPilot's task-level keys this job sets (TASK_KEYS and the extras), for its
        SkyPilot task."""
        keys = {k: getattr(self, k) for k in TASK_KEYS if getattr(self, k) is not None}
        if self.git_workdir is not None:  # SkyPilot clones it on the VM
            keys["workdir"] = self.git_workdir.for_skypilot()
        return {**keys, **self.extra_task_keys()}

    def cloud_only(self, resources=None) -> tuple[tuple[str, str], ...]:
        """(key, what it asks for) of each key only a cloud VM honors: the resources' (of
        `resources`, one candidate of them, by default the section) and the task's."""
        r = self.resources if resources is None else resources
        keys = [(f"resources.{k}", CLOUD_ONLY[k]) for k in r.cloud_only()]
        keys += [(k, TASK_CLOUD_ONLY[k]) for k in TASK_CLOUD_ONLY if getattr(self, k) is not None]
        return tuple(keys)

    def carried(self) -> tuple[str, ...]:
        """The keys for a cloud VM that a run elsewhere goes without (noted in the plan)."""
        return tuple([f"resources.{k}" for k in self.resources.carried()]
                     + [k for k in TASK_KEYS if k not in TASK_CLOUD_ONLY and getattr(self, k) is not None]
                     + list(self.extra_task_keys()))

    # -- helpers that do not change the spec --------------------------------------

    def env_strings(self) -> dict[str, str]:
        out = {}
        for k, v in self.envs.items():
            if v is None:
                continue
            out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
        return out

    def secret_strings(self, environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
        """The `secrets:` values, a null one taken from the environment (SpecError if unset)."""
        env = os.environ if environ is None else environ
        out = {}
        for k, v in self.secrets.items():
            if v is None:
                if k not in env:
                    raise self.error(f"secrets.{k}", "no value, and it is not set in the environment",
                                     f"export {k}=... before submitting, or give its value here")
                v = env[k]
            out[k] = v
        return out

    def error(self, key: str, problem: str, hint: str | None = None) -> SpecError:
        """A SpecError located at `key` (dotted path) in the file this spec came from."""
        src = self._source or SourceMap("<job>", {})
        return SpecError(src.file, src.line_of(tuple(key.split("."))), key, problem, hint)

    @property
    def source_file(self) -> Optional[str]:
        return self._source.file if self._source else None

    @property
    def git_workdir(self) -> Optional[GitWorkdir]:
        return self.workdir if isinstance(self.workdir, GitWorkdir) else None

    def workdir_path(self) -> Optional[Path]:
        """The workdir folder on this machine; None for none, or for a git repository."""
        if not isinstance(self.workdir, str):
            return None
        p = Path(self.workdir).expanduser()
        if not p.is_absolute() and self._source and self._source.file != "<job>":
            # orch reads a relative workdir from the job file's folder; SkyPilot from the
            # folder `sky launch` runs in, which a file written for it may count on.
            beside = Path(self._source.file).resolve().parent / p
            p = beside if beside.is_dir() or not p.resolve().is_dir() else p
        return p.resolve()
