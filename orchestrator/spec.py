"""The job file: a SkyPilot-style task YAML plus orch's own keys, validated strictly."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml
from typing import Annotated

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, PositiveFloat,
                      PositiveInt, PrivateAttr, ValidationError, field_validator,
                      model_validator)

from orchestrator.errors import SpecError

TARGETS = ("local", "onprem", "cloud")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ACCEL_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_.+-]*)\s*(?::\s*([0-9]*\.?[0-9]+))?\s*$")
_ENTRYPOINT_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_QUANTITY_RE = re.compile(r"^\d+(\.\d+)?\+?$")
_CRON_FIELD_RE = re.compile(r"^[\d*/,\-A-Za-z?]+$")


def _auto_bool(v: Any) -> Any:
    if v == "auto" or isinstance(v, bool):
        return v
    raise ValueError(f"{v!r}: write auto, true or false")


def _auto_count(v: Any) -> Any:
    if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
        return v
    raise ValueError(f"{v!r}: write auto or a whole number >= 0")


AutoBool = Annotated[Union[Literal["auto"], bool], BeforeValidator(_auto_bool)]
AutoCount = Annotated[Union[Literal["auto"], int], BeforeValidator(_auto_count)]
_UNION_TAGS = {"str", "int", "float", "bool", "none", "dict", "list"}


class Strict(BaseModel):
    """Every user-facing model forbids unknown keys: a typo is an error, not silence."""

    model_config = ConfigDict(extra="forbid")


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
        raise ValueError(f"{text!r} is not an accelerator: write NAME or NAME:COUNT, e.g. H100:8")
    count = float(m.group(2)) if m.group(2) is not None else 1.0
    if count <= 0:
        raise ValueError(f"{text!r}: the accelerator count must be positive")
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
    accelerators: Union[str, dict[str, float], list[str], None] = None
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
                parse_accelerator(f"{name}:{count}" if count is not None else str(name))
            v = {str(k): (1 if c is None else c) for k, c in v.items()}
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
            return [parse_accelerator(f"{k}:{c}") for k, c in a.items()]
        return [parse_accelerator(x) for x in a]

    @property
    def accelerators_ordered(self) -> bool:
        return isinstance(self.accelerators, list)


class Train(Strict):
    job: Optional[str] = None
    entrypoint: Optional[str] = None
    config: dict[str, Any] = Field(default_factory=dict)
    sweep: list[str] = Field(default_factory=list,
                             description="config keys that vary between runs of the same job")

    @field_validator("entrypoint")
    @classmethod
    def _check_entrypoint(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _ENTRYPOINT_RE.match(v):
            raise ValueError(f"{v!r} is not an entrypoint: write 'package.module:function'")
        return v

    @field_validator("job")
    @classmethod
    def _check_job(cls, v: Optional[str]) -> Optional[str]:
        from jobs.builtin import BUILTIN_JOBS  # a plain dict, no torch import

        if v is not None and v not in BUILTIN_JOBS:
            raise ValueError(f"no built-in job {v!r}; built-in jobs: {', '.join(sorted(BUILTIN_JOBS))}")
        return v

    @model_validator(mode="after")
    def _one_of(self) -> "Train":
        if (self.job is None) == (self.entrypoint is None):
            raise ValueError("give exactly one of 'job' (a built-in job) or "
                             "'entrypoint' ('package.module:function')")
        return self


class Scaling(Strict):
    num_workers: PositiveInt = 1
    use_gpu: AutoBool = "auto"
    # pack: fill a node before the next (fast links within a node); spread: one per node.
    placement: Literal["pack", "spread"] = "pack"


class Data(Strict):
    loader_workers: AutoCount = "auto"
    pin_memory: AutoBool = "auto"


class Schedule(Strict):
    kind: Literal["auto", "exploratory", "steady"] = "auto"
    cron: Optional[str] = None

    @field_validator("cron")
    @classmethod
    def _check_cron(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        fields = v.split()
        if len(fields) != 5 or not all(_CRON_FIELD_RE.match(f) for f in fields):
            raise ValueError(f"{v!r} is not a cron schedule: write five fields, "
                             "minute hour day month weekday, e.g. '0 3 * * *'")
        return v


class Budget(Strict):
    max_cost: Optional[PositiveFloat] = None
    max_hourly: Optional[PositiveFloat] = None


class Placement(Strict):
    allow: list[Literal["local", "onprem", "cloud"]] = Field(default_factory=lambda: list(TARGETS))

    @field_validator("allow")
    @classmethod
    def _check_allow(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("allow at least one of local, onprem, cloud")
        if len(set(v)) != len(v):
            raise ValueError("each target may appear once")
        return v


class Checkpoint(Strict):
    storage: Optional[str] = None
    num_to_keep: PositiveInt = 2
    max_failures: int = Field(0, ge=-1, description="worker-group restarts; -1 means unlimited")
    resume_from: Optional[str] = Field(
        None, description="continue an earlier job's run from its latest checkpoint: a job id "
                          "(or unique prefix), or 'latest' for the newest job of this name")


class Estimate(Strict):
    hours: PositiveFloat
    gpu: Optional[str] = None


class JobSpec(Strict):
    # SkyPilot's common task keys.
    name: Optional[str] = None
    workdir: Optional[str] = None
    num_nodes: PositiveInt = 1
    resources: Resources = Field(default_factory=Resources)
    envs: dict[str, Union[str, int, float, bool, None]] = Field(default_factory=dict)
    file_mounts: dict[str, Union[str, dict[str, Any]]] = Field(default_factory=dict)
    setup: Optional[str] = None
    run: Optional[str] = None
    # orch's keys.
    train: Optional[Train] = None
    scaling: Scaling = Field(default_factory=Scaling)
    precision: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    data: Data = Field(default_factory=Data)
    schedule: Schedule = Field(default_factory=Schedule)
    budget: Budget = Field(default_factory=Budget)
    placement: Placement = Field(default_factory=Placement)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    estimate: Optional[Estimate] = None

    _source: "SourceMap" = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _NAME_RE.match(v):
            raise ValueError(f"{v!r}: use letters, digits, '-', '_' or '.', at most 63 characters")
        return v

    @field_validator("envs")
    @classmethod
    def _check_envs(cls, v: dict[str, Any]) -> dict[str, Any]:
        for k in v:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
                raise ValueError(f"{k!r} is not an environment variable name")
        return v

    @model_validator(mode="after")
    def _train_or_run(self) -> "JobSpec":
        if (self.train is None) == (self.run is None):
            raise ValueError("give exactly one of 'train:' (a built-in job or entrypoint) "
                             "or 'run:' (a shell command)")
        return self

    # -- helpers that do not change the spec --------------------------------------

    def env_strings(self) -> dict[str, str]:
        out = {}
        for k, v in self.envs.items():
            if v is None:
                continue
            out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
        return out

    def error(self, key: str, problem: str, hint: str | None = None) -> SpecError:
        """A SpecError located at `key` (dotted path) in the file this spec came from."""
        src = self._source or SourceMap("<job>", {})
        return SpecError(src.file, src.line_of(tuple(key.split("."))), key, problem, hint)

    @property
    def source_file(self) -> Optional[str]:
        return self._source.file if self._source else None

    def workdir_path(self) -> Optional[Path]:
        if self.workdir is None:
            return None
        p = Path(self.workdir).expanduser()
        if not p.is_absolute() and self._source and self._source.file != "<job>":
            p = Path(self._source.file).resolve().parent / p
        return p.resolve()


class SourceMap:
    """Where each key of a YAML document sits, so errors can name the line."""

    def __init__(self, file: str, lines: dict[tuple, int]):
        self.file = file
        self.lines = lines

    def line_of(self, path: tuple) -> Optional[int]:
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), None)


def _walk(node: yaml.Node, path: tuple, lines: dict, file: str) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k.value)
            if key in seen:
                raise SpecError(file, k.start_mark.line + 1, ".".join(map(str, path + (key,))),
                                "this key appears twice", "keep one of them")
            seen.add(key)
            lines[path + (key,)] = k.start_mark.line + 1
            _walk(v, path + (key,), lines, file)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            lines[path + (i,)] = v.start_mark.line + 1
            _walk(v, path + (i,), lines, file)


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys a mapping at `loc` accepts, for 'did you mean' help."""
    for part in loc:
        field = model.model_fields.get(str(part)) if isinstance(part, str) else None
        if field is None:
            continue
        ann = field.annotation
        candidates = [ann] + list(getattr(ann, "__args__", ()))
        nxt = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if nxt is None:
            return []
        model = nxt
    return list(model.model_fields)


def _describe(err: dict, allowed: list[str]) -> tuple[str, Optional[str]]:
    kind, msg = err["type"], err["msg"]
    key = str(err["loc"][-1]) if err["loc"] else ""
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f"did you mean '{close[0]}'?" if close else None
        if allowed:
            hint = (hint + " " if hint else "") + f"allowed here: {', '.join(allowed)}"
        return f"unknown key '{key}'", hint
    if kind == "missing":
        return "this key is required", None
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    inp = err.get("input")
    if kind not in ("value_error",) and not isinstance(inp, (dict, list)):
        msg = f"{msg} (got {inp!r})"
    return msg, None


def _pick_error(errors: list[dict]) -> dict:
    """Of pydantic's errors for a union, show the one that reached deepest, then the first."""
    return max(errors, key=lambda e: len([p for p in e["loc"] if p not in _UNION_TAGS]))


def load_spec_text(text: str, file: str = "<job>") -> JobSpec:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        raise SpecError(file, line, None, f"YAML syntax error: {e.problem or e}",
                        "check the indentation and quoting on that line") from None
    except yaml.YAMLError as e:
        raise SpecError(file, None, None, f"YAML syntax error: {e}") from None
    if node is None:
        raise SpecError(file, None, None, "the job file is empty",
                        "write at least a 'train:' or 'run:' section (see examples/quickstart.yaml)")
    lines: dict[tuple, int] = {}
    _walk(node, (), lines, file)
    try:
        data = yaml.SafeLoader(text).get_single_data()
    except yaml.YAMLError as e:  # e.g. an unhashable key
        raise SpecError(file, None, None, f"YAML error: {e}") from None
    if not isinstance(data, dict):
        raise SpecError(file, 1, None, "the job file must be a mapping of keys to values",
                        "start with keys such as 'name:', 'resources:' and 'train:'")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise SpecError(file, 1, str(bad[0]), "keys must be text")
    src = SourceMap(file, lines)
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as e:
        err = _pick_error(e.errors())
        # Drop pydantic's union-branch tags ('str', 'dict[str,float]', ...) from the path.
        loc = tuple(p for p in err["loc"]
                    if isinstance(p, int) or not ("[" in p or p in _UNION_TAGS))
        problem, hint = _describe(err, _allowed_keys(JobSpec, loc))
        key = ".".join(str(p) for p in loc) or None
        raise SpecError(file, src.line_of(loc), key, problem, hint) from None
    spec._source = src
    if spec.name is None and file != "<job>":
        spec.name = _default_name(file)
    return spec


def _default_name(file: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "-", Path(file).stem).strip("-.") or "job"
    return stem[:63]


def load_spec(path: str | Path) -> JobSpec:
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise SpecError(str(path), None, None, "no such file",
                        "check the path; examples/quickstart.yaml is a working job file") from None
    except IsADirectoryError:
        raise SpecError(str(path), None, None, "is a directory, not a job file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(str(path), None, None, f"cannot read the file: {e}") from None
    return load_spec_text(text, str(p.resolve()) if p.is_absolute() else str(path))
