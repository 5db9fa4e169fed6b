"""The `resources:` section: accelerators (one, a mapping, or a preference list), CPUs, memory."""

from __future__ import annotations

import math
import re
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, PositiveInt, field_validator

from orchestrator.inputs import clip
from orchestrator.spec.base import Strict

_ACCEL_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_.+-]*)\s*(?::\s*([0-9]*\.?[0-9]+))?\s*$")
_QUANTITY_RE = re.compile(r"^\d+(\.\d+)?\+?$")


class AcceleratorChoice(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    count: float

    def __str__(self) -> str:
        n = int(self.count) if self.count == int(self.count) else self.count
        return f"{self.name}:{n}"


def parse_accelerator(text: str) -> AcceleratorChoice:
    m = _ACCEL_RE.match(str(text))
    if not m:
        raise ValueError(f"{clip(text)} is not an accelerator: write NAME or NAME:COUNT, e.g. H100:8")
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


def quantity_min(v: Any) -> Optional[float]:
    """The least amount a `cpus`/`memory` value asks for (`8+` and `8` both mean >= 8)."""
    return None if v is None else float(str(v).rstrip("+"))


class Resources(Strict):
    accelerators: Union[str, dict[str, Optional[float]], list[str], None] = None
    cpus: Union[int, float, str, None] = None
    memory: Union[int, float, str, None] = None
    use_spot: bool = False
    disk_size: Optional[PositiveInt] = None
    cloud: Optional[str] = None
    region: Optional[str] = None
    infra: Optional[str] = None

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
        return _quantity(v, "memory size in GiB")

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
