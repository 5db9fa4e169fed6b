"""The `resources:` section: accelerators (one, a mapping, or a preference list), CPUs, memory,
and SkyPilot's keys for a cloud VM (which pin a job to the cloud, or ride along to it)."""

from __future__ import annotations

import math
import re
from typing import Any, Literal, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from orchestrator.base.inputs import clip
from orchestrator.spec.base import Strict

_ACCEL_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_.+-]*)\s*(?::\s*([0-9]*\.?[0-9]+))?\s*$")
# A GPU by its memory per device, at least (dstack's `24GB..` too), optionally :COUNT.
_GPU_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:GB|GiB|G)\s*(?:\+|\.\.)?\s*"
                            r"(?::\s*([0-9]*\.?[0-9]+))?\s*$", re.IGNORECASE)
_QUANTITY_RE = re.compile(r"^\d+(\.\d+)?\+?$")
# SkyPilot's sizes (sky/skylet/constants.py MEMORY_SIZE_UNITS), in GiB; a bare number is GiB.
_UNITS_GIB = {"k": 2.0 ** -20, "m": 2.0 ** -10, "g": 1.0, "t": 2.0 ** 10, "p": 2.0 ** 20}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kmgtp])(?:b|i|ib)?)?\s*\+?\s*$", re.IGNORECASE)

# SkyPilot's resources keys that only a cloud VM can honor: a job that sets one is placed
# on the cloud, and the plan says why local and on-prem are out.
CLOUD_ONLY = {"instance_type": "an instance type", "image_id": "a VM image",
              "disk_tier": "a disk tier", "network_tier": "a network tier",
              "accelerator_args": "accelerator arguments (a TPU runtime)",
              "zone": "a zone", "volumes": "disk volumes attached to a VM"}
# Keys that matter to a VM, not to a training run elsewhere: carried to a cloud VM as they
# are, and noted when the job runs on owned hardware. SkyPilot's other resources keys
# (local_disk, priority, max_hourly_cost, ...: its schema checked them) are kept as extras
# and carried the same way.
CARRIED = ("ports", "labels", "autostop", "job_recovery", "max_hourly_cost")


class AcceleratorChoice(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    count: float

    def __str__(self) -> str:
        n = int(self.count) if self.count == int(self.count) else self.count
        return f"{self.name}:{n}"


def parse_accelerator(text: str) -> AcceleratorChoice:
    mem = _GPU_MEMORY_RE.match(str(text))
    if mem:  # a GPU by its memory: `24GB+`, any model with at least 24 GB each
        count = float(mem.group(2)) if mem.group(2) is not None else 1.0
        if not count > 0 or not float(mem.group(1)) > 0:
            raise ValueError(f"{clip(text)}: the memory and the count must be positive numbers")
        return AcceleratorChoice(name=f"{float(mem.group(1)):g}GB+", count=count)
    m = _ACCEL_RE.match(str(text))
    if not m:
        raise ValueError(f"{clip(text)} is not an accelerator: write NAME or NAME:COUNT, e.g. "
                         "H100:8, or a GPU by its memory, e.g. 24GB+ or 24GB+:2")
    count = float(m.group(2)) if m.group(2) is not None else 1.0
    if not count > 0 or not math.isfinite(count):
        raise ValueError(f"{clip(text)}: the accelerator count must be a positive number")
    return AcceleratorChoice(name=m.group(1), count=count)


def _quantity(v: Any, what: str) -> Any:
    if v is None:
        return v
    if isinstance(v, bool) or not _QUANTITY_RE.match(str(v)):
        raise ValueError(f"{v!r} is not a {what}: write a number, optionally with '+' "
                         f"for 'at least' (e.g. 8 or 8+)")
    return v


def size_gib(v: Any) -> Optional[float]:
    """A size as SkyPilot writes one (32, '32+', '32GB', '1TB+', '512Mi') in GiB; None when
    it is not one."""
    m = _SIZE_RE.match(str(v)) if not isinstance(v, bool) else None
    if not m:
        return None
    return float(m.group(1)) * _UNITS_GIB[(m.group(2) or "g").lower()]


def quantity_min(v: Any) -> Optional[float]:
    """The least amount a `cpus`/`memory` value asks for (`8+` and `8` both mean >= 8; a
    memory size in SkyPilot's units, in GiB)."""
    return None if v is None else size_gib(v)


class Resources(Strict):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    accelerators: Union[str, dict[str, Optional[float]], list[str], None] = None
    cpus: Union[int, float, str, None] = None
    memory: Union[int, float, str, None] = None
    use_spot: bool = False
    disk_size: Optional[PositiveInt] = None  # GB; SkyPilot's '256GB' and '1TB' forms too
    cloud: Optional[str] = None
    region: Optional[str] = None
    infra: Optional[str] = None
    # SkyPilot's, for a cloud VM (CLOUD_ONLY, CARRIED), passed to its task unchanged.
    instance_type: Optional[str] = None
    image_id: Union[str, dict[str, str], None] = None
    disk_tier: Optional[Literal["low", "medium", "high", "ultra", "best"]] = None
    network_tier: Optional[Literal["standard", "best"]] = None
    accelerator_args: Optional[dict[str, Any]] = None
    zone: Optional[str] = None
    # SkyPilot's cap on a VM's price per hour: cloud offers above it are not chosen.
    max_hourly_cost: Optional[float] = None
    volumes: Optional[list[dict[str, Any]]] = None
    ports: Union[int, str, list[Union[int, str]], None] = None
    labels: Optional[dict[str, str]] = None
    autostop: Union[bool, int, str, dict[str, Any], None] = None
    job_recovery: Union[str, dict[str, Any], None] = None
    # SkyPilot's candidate lists: each entry overrides the keys above for one candidate;
    # `ordered` is a preference (tried first to last), `any_of` a set (cheapest wins).
    any_of: Optional[list[dict[str, Any]]] = None
    ordered: Optional[list[dict[str, Any]]] = None

    @model_validator(mode="after")
    def _check_candidates(self) -> Resources:
        if self.any_of is not None and self.ordered is not None:
            raise ValueError("give any_of or ordered, not both (as in SkyPilot)")
        self.variants()  # each candidate must be valid resources on its own
        return self

    def variants(self) -> list[Resources]:
        """The candidates this section allows: itself, or one per any_of/ordered entry (the
        entry's keys over the section's), in the file's order."""
        entries = self.any_of if self.any_of is not None else self.ordered
        if entries is None:
            return [self]
        if not entries:
            raise ValueError(f"{'any_of' if self.any_of is not None else 'ordered'}: an empty "
                             "list: give at least one candidate")
        base = self.model_dump(exclude={"any_of", "ordered"}, exclude_unset=True)
        out = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise ValueError(f"candidate {i + 1} is not a mapping of resources keys")
            if "any_of" in entry or "ordered" in entry:
                raise ValueError(f"candidate {i + 1}: any_of and ordered do not nest")
            try:
                out.append(Resources.model_validate({**base, **entry}))
            except ValidationError as e:
                first = e.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                what = ("unknown key" if first["type"] == "extra_forbidden"
                        else first["msg"].removeprefix("Value error, "))
                raise ValueError(f"candidate {i + 1}{' ' + where if where else ''}: {what}") from None
        return out

    @field_validator("disk_size", mode="before")
    @classmethod
    def _check_disk_size(cls, v: Any) -> Any:
        if not isinstance(v, str):
            return v
        size = size_gib(v) if not v.strip().endswith("+") else None
        if size is None:
            raise ValueError(f"{clip(v)} is not a disk size: write GB as a number, or e.g. "
                             "256GB or 1TB")
        return max(1, math.ceil(size))

    def cloud_only(self) -> tuple[str, ...]:
        """The CLOUD_ONLY keys this job sets."""
        return tuple(k for k in CLOUD_ONLY if getattr(self, k) is not None)

    def carried(self) -> tuple[str, ...]:
        """The CARRIED keys this job sets, and the extras."""
        return tuple([k for k in CARRIED if getattr(self, k) is not None]
                     + [k for k, v in (self.model_extra or {}).items() if v is not None])

    def for_cloud_vm(self) -> dict[str, Any]:
        """SkyPilot's VM keys this job sets, as its resources YAML has them."""
        keys = {k: getattr(self, k) for k in ("cpus", "memory", *CLOUD_ONLY, *CARRIED)
                if getattr(self, k) is not None}
        return {**keys, **{k: v for k, v in (self.model_extra or {}).items() if v is not None}}

    @field_validator("accelerators", mode="before")
    @classmethod
    def _check_accelerators(cls, v: Any) -> Any:
        if v is None:
            return v
        if isinstance(v, str):
            parse_accelerator(v)
        elif isinstance(v, dict):
            if not v:
                raise ValueError("an empty mapping: list at least one accelerator")
            for name, count in v.items():
                if not isinstance(name, str):
                    raise ValueError(f"{name!r} is not an accelerator name: write e.g. H100")
                parse_accelerator(f"{name}:{count}" if count is not None else str(name))
            # {NAME: null} is one NAME; SkyPilot's set form {'A100:1', 'T4:4'} is a mapping
            # of full choices to null, kept as it is (T4:1 and T4:4 may both be in it).
            v = {str(k): c for k, c in v.items()}
        elif isinstance(v, list):
            if not v:
                raise ValueError("an empty list: list at least one accelerator")
            for item in v:
                if not isinstance(item, str):
                    raise ValueError(f"{item!r} is not an accelerator: write NAME or NAME:COUNT")
                parse_accelerator(item)
        else:
            raise ValueError("write NAME:COUNT, a mapping {NAME: COUNT, ...} or a list [NAME:COUNT, ...]")
        return v

    @field_validator("cpus")
    @classmethod
    def _check_cpus(cls, v: Any) -> Any:
        return _quantity(v, "CPU count")

    @field_validator("memory")
    @classmethod
    def _check_memory(cls, v: Any) -> Any:
        if v is None or isinstance(v, (int, float)) and not isinstance(v, bool):
            return _quantity(v, "memory size in GiB")
        if str(v).strip().endswith("x"):  # SkyPilot's own, for its jobs controller: a multiple of the CPUs
            raise ValueError(f"{clip(v)}: a memory size per CPU is SkyPilot's internal form; "
                             "write GiB, e.g. 32 or 32GB+")
        if size_gib(v) is None:
            raise ValueError(f"{v!r} is not a memory size: write GiB as a number, or a size "
                             "such as 32GB, optionally with '+' for 'at least' (e.g. 32GB+)")
        return v

    def accelerator_choices(self) -> list[AcceleratorChoice]:
        """Each acceptable accelerator; in preference order when given as a list."""
        a = self.accelerators
        if a is None:
            return []
        if isinstance(a, str):
            return [parse_accelerator(a)]
        if isinstance(a, dict):
            return [parse_accelerator(k if c is None else f"{k}:{c}") for k, c in a.items()]
        return [parse_accelerator(x) for x in a]

    @property
    def accelerators_ordered(self) -> bool:
        return isinstance(self.accelerators, list)
