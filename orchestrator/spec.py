"""The job file: a SkyPilot-style task YAML plus orch's own keys, validated strictly."""

from __future__ import annotations

import datetime
import difflib
import math
import os
import re
import time
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from orchestrator.errors import SpecError
from orchestrator.inputs import NotRegularFile, read_regular, storage_problem

TARGETS = ("local", "onprem", "cloud")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ACCEL_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_.+-]*)\s*(?::\s*([0-9]*\.?[0-9]+))?\s*$")
_ENTRYPOINT_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_QUANTITY_RE = re.compile(r"^\d+(\.\d+)?\+?$")
_CRON_FIELD_RE = re.compile(r"^[\d*/,\-A-Za-z?#]+$")
_CRON_FIELDS = (("minute", "0-59"), ("hour", "0-23"), ("day", "1-31"),
                ("month", "1-12 or jan-dec"), ("weekday", "0-7 or sun-sat"))
_CRON_HELP = "write five fields, minute hour day month weekday, e.g. '0 3 * * *' (UTC)"
_RESUME_RE = re.compile(r"^(latest|orch-[A-Za-z0-9]*)$")
# Limits that keep a hostile or broken job file from eating memory or the stack: a real
# job file is a few KiB, a few levels deep, with a few hundred values.
MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_VALUES = 100_000  # after expanding YAML aliases (a "billion laughs" file expands to 10^9)


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

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


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
        raise ValueError(f"{_short(text)} is not an accelerator: write NAME or NAME:COUNT, e.g. H100:8")
    count = float(m.group(2)) if m.group(2) is not None else 1.0
    if not count > 0 or not math.isfinite(count):
        raise ValueError(f"{_short(text)}: the accelerator count must be a positive number")
    return AcceleratorChoice(name=m.group(1), count=count)


def _plain(v: Any) -> Any:
    """A free-form value (train.config, a file_mounts entry) as JSON-like data, so it can be
    stored, fingerprinted and sent to the job: text keys, no !!binary or !!set; dates as text."""
    if isinstance(v, dict):
        bad = next((k for k in v if not isinstance(k, str)), None)
        if bad is not None or None in v:
            raise ValueError(f"the key {_short(bad)} is not text: quote it")
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    raise ValueError(f"a {type(v).__name__} value ({_short(v)}) cannot be used here: "
                     "write text, numbers, lists or mappings")


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
                if not isinstance(name, str):
                    raise ValueError(f"{name!r} is not an accelerator name: write e.g. H100")
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

    @field_validator("config", mode="before")
    @classmethod
    def _check_config(cls, v: Any) -> Any:
        return _plain(v) if isinstance(v, dict) else v

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
    def _one_of(self) -> Train:
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
    deadline_hours: Optional[PositiveFloat] = Field(
        None, description="hours after submission by which the job should be done: steady work "
                          "waits for owned GPUs while it can still finish by then")

    @field_validator("cron")
    @classmethod
    def _check_cron(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        fields = v.split()
        if len(fields) != 5 or not all(_CRON_FIELD_RE.match(f) for f in fields):
            raise ValueError(f"{_short(v)} is not a cron schedule: {_CRON_HELP}")
        cron_problem = _cron_problem(fields)
        if cron_problem:
            raise ValueError(f"{_short(v)}: {cron_problem}")
        return v


def _cron_problem(fields: list[str]) -> Optional[str]:
    """Why croniter (what `orch serve` runs schedules with) cannot use these five fields,
    or None. A schedule that parses but has no date to fire on (Feb 31) is refused too."""
    from croniter import croniter  # small, and loaded only for a job file with a cron

    # croniter's own errors do not say which field; try each alone to name it.
    for i, (name, allowed) in enumerate(_CRON_FIELDS):
        probe = " ".join(f if j == i else "*" for j, f in enumerate(fields))
        try:
            croniter.expand(probe)
        except (ValueError, KeyError, IndexError, TypeError, OverflowError):
            return f"the {name} field {_short(fields[i])} is not valid ({allowed}); {_CRON_HELP}"
    expr = " ".join(fields)
    try:
        croniter(expr, time.time()).get_next(float)
    except (ValueError, KeyError, IndexError, TypeError, OverflowError):
        # CroniterBadDateError (a ValueError): no matching date in croniter's search window.
        return ("this schedule never fires (no such date, e.g. February 30 or 31); "
                "day and month must meet on a real date, e.g. '0 3 28 2 *'")
    return None


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

    @field_validator("storage")
    @classmethod
    def _check_storage(cls, v: Optional[str]) -> Optional[str]:
        problem = None if v is None else storage_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("resume_from")
    @classmethod
    def _check_resume_from(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _RESUME_RE.match(v):
            close = difflib.get_close_matches(v, ["latest"], n=1)
            raise ValueError(f"{_short(v)} is neither 'latest' nor a job id: write latest, or "
                             "a job id (or its unique prefix) from `orch status`, e.g. orch-1a2b3c4d"
                             + (" (did you mean 'latest'?)" if close else ""))
        return v


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
    # As in SkyPilot: passed to the job like envs, stored and shown only redacted; a null
    # value is read from the submitting shell's environment.
    secrets: dict[str, Optional[str]] = Field(default_factory=dict)
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

    _source: SourceMap = PrivateAttr(default=None)

    @field_validator("file_mounts", mode="before")
    @classmethod
    def _check_file_mounts(cls, v: Any) -> Any:
        return _plain(v) if isinstance(v, dict) else v

    @field_validator("workdir")
    @classmethod
    def _check_workdir(cls, v: Optional[str]) -> Optional[str]:
        try:
            v is None or Path(v).expanduser()
        except RuntimeError:  # ~user for a user that does not exist
            raise ValueError(f"{_short(v)}: no such user's home directory") from None
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
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
                raise ValueError(f"{k!r} is not an environment variable name")
        return v

    @model_validator(mode="after")
    def _train_or_run(self) -> JobSpec:
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

    def secret_strings(self, environ: Optional[dict] = None) -> dict[str, str]:
        """The `secrets:` values, a null one taken from the environment (SpecError if unset)."""
        environ = os.environ if environ is None else environ
        out = {}
        for k, v in self.secrets.items():
            if v is None:
                if k not in environ:
                    raise self.error(f"secrets.{k}", "no value, and it is not set in the environment",
                                     f"export {k}=... before submitting, or give its value here")
                v = environ[k]
            out[k] = v
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


class _Loader(yaml.SafeLoader):
    """SafeLoader whose bad tagged values (`!!int abc`, a date like 2024-13-45) are YAML errors
    at their line, not Python exceptions from deep inside PyYAML."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
            value = node.value if isinstance(node, yaml.ScalarNode) else node.tag
            why = f" ({e})" if isinstance(e, (ValueError, OverflowError)) else ""
            raise yaml.constructor.ConstructorError(
                None, None, f"{_short(value)} is not a valid {node.tag.rsplit(':', 1)[-1]}{why}; "
                "quote it if you meant text", node.start_mark) from None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _check_shape(text: str, file: str) -> None:
    """Refuse documents too deep, self-referencing, or that expand (through aliases) to too
    many values, reading only the event stream, before anything is built from it."""
    done: dict[str, tuple[int, int]] = {}   # anchor -> (values, depth) it expands to
    stack: list[list] = []                  # per open collection: [anchor, values, depth]
    total = 0
    for ev in yaml.parse(text, Loader=_Loader):
        line = ev.start_mark.line + 1
        if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            stack.append([ev.anchor, 1, 1])
            size, depth = 1, len(stack)
        elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, n, d = stack.pop()
            if anchor is not None:
                done[anchor] = (n, d)
            if stack:
                stack[-1][1] += n
                stack[-1][2] = max(stack[-1][2], d + 1)
            continue
        elif isinstance(ev, yaml.ScalarEvent):
            size, depth = 1, len(stack)
            if ev.anchor is not None:
                done[ev.anchor] = (1, 0)
            if stack:
                stack[-1][1] += 1
        elif isinstance(ev, yaml.AliasEvent):
            if any(open_[0] == ev.anchor for open_ in stack):
                raise SpecError(file, line, None, f"the alias *{ev.anchor} is inside the value it "
                                "names, so it never ends", "an alias can only repeat a finished value")
            size, d = done.get(ev.anchor, (1, 0))
            depth = len(stack) + d
            if stack:
                stack[-1][1] += size
                stack[-1][2] = max(stack[-1][2], d + 1)
        else:
            continue
        total += size
        if depth > MAX_DEPTH:
            raise SpecError(file, line, None, f"nested more than {MAX_DEPTH} levels deep",
                            "a job file needs a few levels; flatten the structure")
        if total > MAX_VALUES:
            raise SpecError(file, line, None, f"expands to more than {MAX_VALUES:,} values "
                            "(YAML aliases repeat whole values)",
                            "write the values out, or use fewer aliases")


def _walk(node: yaml.Node, path: tuple, lines: dict, file: str) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.ScalarNode) and "\x00" in node.value:
        raise SpecError(file, node.start_mark.line + 1, ".".join(map(str, path)) or None,
                        "contains a NUL character (\\0), which no file name, command or "
                        "environment value can hold")
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
        msg = f"{msg} (got {_short(inp)})"
    return msg, None


def _pick_error(errors: list[dict]) -> dict:
    """Of pydantic's errors for a union, show the one that reached deepest, then the first."""
    return max(errors, key=lambda e: len([p for p in e["loc"] if p not in _UNION_TAGS]))


def _too_big(file: str, size: Optional[int]) -> SpecError:
    """`size` None: a device or pipe, read only up to the limit."""
    what = f"is {size:,} bytes; the limit is" if size is not None else "is over the limit of"
    return SpecError(file, None, None, f"the job file {what} {MAX_BYTES:,} bytes",
                     "put large data in files the job reads (workdir, file_mounts)")


def load_spec_text(text: str, file: str = "<job>") -> JobSpec:
    if len(text) > MAX_BYTES:
        raise _too_big(file, len(text.encode("utf-8", "surrogatepass")))
    try:
        _check_shape(text, file)
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        raise SpecError(file, line, None, f"YAML syntax error: {e.problem or e}",
                        "check the indentation and quoting on that line") from None
    except yaml.reader.ReaderError as e:  # a control character, or a lone surrogate
        line = text[:e.position].count("\n") + 1
        raise SpecError(file, line, None, f"YAML syntax error: the character {chr(e.character)!r} "
                        "is not allowed in YAML", "remove it, or write it as an escape in a "
                        "double-quoted string") from None
    except yaml.YAMLError as e:
        raise SpecError(file, None, None, f"YAML syntax error: {e}") from None
    if node is None:
        raise SpecError(file, None, None, "the job file is empty",
                        "write at least a 'train:' or 'run:' section (see examples/quickstart.yaml)")
    lines: dict[tuple, int] = {}
    _walk(node, (), lines, file)
    try:
        data = _Loader(text).get_single_data()
    except yaml.MarkedYAMLError as e:  # e.g. an unhashable key, or `!!int abc`
        line = e.problem_mark.line + 1 if e.problem_mark else None
        context = f"{e.context}: " if e.context else ""
        raise SpecError(file, line, None, f"YAML error: {context}{e.problem}") from None
    except yaml.YAMLError as e:
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
    _check_together(spec, src)
    if spec.name is None and file != "<job>":
        spec.name = _default_name(file)
    return spec


def _check_together(spec: JobSpec, src: SourceMap) -> None:
    """Checks across keys, or of mapping keys, located at the key they are about."""
    def refuse(path: tuple, problem: str, hint: Optional[str] = None) -> SpecError:
        return SpecError(src.file, src.line_of(path), ".".join(map(str, path)), problem, hint)

    if spec.checkpoint.resume_from and spec.train is None:
        raise refuse(("checkpoint", "resume_from"), "only a train: job keeps checkpoints to "
                     "resume from", "remove checkpoint.resume_from, or run the job through train:")
    # What SkyPilot's Task.set_file_mounts refuses only at launch, after orch recorded the job.
    for dest, source in spec.file_mounts.items():
        if "://" in dest:
            raise refuse(("file_mounts", dest), "a destination is a path on the VM, not a "
                         "bucket", "write it as {/path/on/vm: s3://bucket/path}")
        for what, path in (("destination", dest), ("source", source)):
            if isinstance(path, str) and path.endswith("/"):
                raise refuse(("file_mounts", dest), f"the {what} {_short(path)} ends with '/', "
                             "which SkyPilot refuses", "remove the trailing '/'")


def _default_name(file: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "-", Path(file).stem).strip("-.") or "job"
    return stem[:63]


def load_spec(path: str | Path) -> JobSpec:
    p = Path(path)
    try:
        raw = read_regular(p, MAX_BYTES + 1)  # bounded: the path may be huge
    except FileNotFoundError:
        raise SpecError(str(path), None, None, "no such file",
                        "check the path; examples/quickstart.yaml is a working job file") from None
    except NotRegularFile as e:
        raise SpecError(str(path), None, None, f"is {e}, not a job file", "give the path of "
                        "a YAML job file (to submit a command's output, save it to a file "
                        "first)") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise SpecError(str(path), None, None, f"cannot read the file: {e}") from None
    if len(raw) > MAX_BYTES:
        raise _too_big(str(path), p.stat().st_size if p.is_file() else None)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(str(path), raw[:e.start].count(b"\n") + 1, None,
                        f"is not UTF-8 text (byte {e.start} is {raw[e.start]:#04x})",
                        "save the job file as UTF-8 text") from None
    return load_spec_text(text, str(p.resolve()) if p.is_absolute() else str(path))
