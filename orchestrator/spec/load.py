"""Loading a job file: read it, validate it into a JobSpec, and turn pydantic's first error
into one SpecError with the file, line, key and a hint ("did you mean ...?")."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from pydantic import BaseModel, ValidationError

from orchestrator.base.errors import SpecError
from orchestrator.base.inputs import NotRegularFile, clip, read_regular
from orchestrator.spec import sky_schema
from orchestrator.spec.document import MAX_BYTES, SourceMap, read_document, too_big
from orchestrator.spec.job import ORCH_KEYS, JobSpec
from orchestrator.spec.overrides import Overrides

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

# The tags pydantic puts in an error's location for the branch of a union it tried.
_UNION_TAGS = {"str", "int", "float", "bool", "none", "dict", "list", "GitWorkdir", "ElasticWorkers"}


def load_spec(path: str | Path, given: Optional[Overrides] = None) -> JobSpec:
    text, file = read_job_file(path)
    return beside_its_file(load_spec_text(text, file, given), file)


def beside_its_file(spec: JobSpec, file: str) -> JobSpec:
    """A job read from a file on this machine whose own code runs (`run:`, or
    `train.entrypoint`) and that names no workdir: its workdir is the file's folder, as if
    it said `workdir: .` (else `python train.py` ran in whatever folder the target's Ray
    started in). A job file a server was sent is read as it is (no folder of the server's)."""
    own_code = spec.run is not None or (spec.train is not None and spec.train.entrypoint)
    if own_code and "workdir" not in spec.model_fields_set and Path(file).is_file():
        spec.workdir = str(Path(file).resolve().parent)
    return spec


def read_job_file(path: str | Path) -> tuple[str, str]:
    """(text, the name errors give it) of a job file; SpecError when it cannot be read."""
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
        raise too_big(str(path), p.stat().st_size if p.is_file() else None)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(str(path), raw[:e.start].count(b"\n") + 1, None,
                        f"is not UTF-8 text (byte {e.start} is {raw[e.start]:#04x})",
                        "save the job file as UTF-8 text") from None
    return text, str(p.resolve()) if p.is_absolute() else str(path)


# SkyPilot files that are not tasks to run once: what to use for them instead.
NOT_A_JOB = {
    "service": ("a SkyPilot service: orch runs training and batch jobs, not services",
                "serve it with `sky serve up {file}`"),
    "pool": ("a SkyPilot pool of workers: orch runs training and batch jobs, not pools",
             "create the pool with `sky jobs pool apply -p NAME {file}`"),
}


def load_spec_text(text: str, file: str = "<job>", given: Optional[Overrides] = None) -> JobSpec:
    """The job file's text as a JobSpec; `given`: the command line's --env and --secret
    values, over the file's."""
    data, src = read_document(text, file)
    _skypilot_spellings(data, src)
    if given:
        for section, values in (("envs", given.envs), ("secrets", given.secrets)):
            if values and isinstance(data.get(section) or {}, dict):
                data[section] = {**(data.get(section) or {}), **values}
    for what, (kind, instead) in NOT_A_JOB.items():
        if what in data:
            raise SpecError(file, src.line_of((what,)), what, f"makes this {kind}",
                            instead.format(file=file))
    _fill_in_envs(data, src)
    resources = data.get("resources")
    if isinstance(resources, dict) and "_docker_login_config" in resources:
        raise SpecError(file, src.line_of(("resources", "_docker_login_config")),
                        "resources._docker_login_config", "holds a registry password, which "
                        "orch would keep with the job's record",
                        "give SKYPILOT_DOCKER_USERNAME, SKYPILOT_DOCKER_PASSWORD and "
                        "SKYPILOT_DOCKER_SERVER under secrets:, as SkyPilot documents")
    # SkyPilot's schemas judge its part of the file; where orch's model refuses the same
    # key, orch's words are shown (they say what orch reads there).
    refused = sky_schema.problem(data, src, ORCH_KEYS)
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as e:
        err = _pick_error(e.errors())
        # Drop pydantic's union-branch tags ('str', 'dict[str,float]', ...) from the path.
        loc = tuple(p for p in err["loc"]
                    if isinstance(p, int) or not ("[" in p or p in _UNION_TAGS))
        problem, hint = _describe(err, _allowed_keys(JobSpec, loc))
        key = ".".join(str(p) for p in loc) or None
        mine = SpecError(file, src.line_of(loc), key, problem, hint)
        raise (mine if refused is None or _same_place(mine.key, refused.key) else refused) from None
    if refused is not None:
        raise refused
    spec._source = src
    _check_together(spec, src)
    unset = [k for k, v in spec.envs.items() if v is None]
    if unset:  # SkyPilot refuses these at launch; orch before anything is written
        raise SpecError(file, src.line_of(("envs", unset[0])), f"envs.{unset[0]}",
                        "has no value: the job file leaves it to the command line",
                        f"give it with --env {unset[0]}=VALUE (or --env-file FILE), as with "
                        "`sky launch --env`")
    if spec.name is None and file != "<job>":
        spec.name = default_name(file)
    return spec


def _skypilot_spellings(data: dict, src: SourceMap) -> None:
    """SkyPilot's other spellings, read as its loader reads them: `secrets:` as a list of
    names (each taken from the environment), and `resources.gpus:` for `accelerators:` (at
    the top of resources only: SkyPilot does not alias inside any_of or ordered)."""
    if isinstance(data.get("secrets"), list):
        data["secrets"] = {str(k): None for k in data["secrets"]}
    res = data.get("resources")
    if not (isinstance(res, dict) and "gpus" in res):
        return
    if "accelerators" in res:
        raise SpecError(src.file, src.line_of(("resources", "gpus")), "resources.gpus",
                        "give gpus or accelerators, not both",
                        "gpus is SkyPilot's other name for accelerators")
    data["resources"] = {("accelerators" if k == "gpus" else k): v for k, v in res.items()}
    for path, line in list(src.lines.items()):  # errors about it still name its line
        if path[:2] == ("resources", "gpus"):
            src.lines[("resources", "accelerators", *path[2:])] = line


# `$NAME` and `${NAME}`, as SkyPilot's Task.from_yaml_config finds them (sky/task.py).
_VAR = re.compile(r"\$\{?\b([a-zA-Z_][a-zA-Z0-9_]*)\b\}?")
# Where SkyPilot fills in a task's envs when it reads the file (its `service` is refused
# before): in file_mounts' paths, bucket names and sources, the workdir and volumes.
SUBSTITUTED = ("file_mounts", "workdir", "volumes")


def _fill_in_envs(data: dict, src: SourceMap) -> None:
    """`$NAME` / `${NAME}` in file_mounts, workdir and volumes replaced by the env's value (the file's,
    or --env's over it), as SkyPilot does; a name that is no env is left as written, a
    null secret too (SkyPilot leaves those). A secret with a value (inline, or --secret) is
    refused there: SkyPilot would fill it in, but these keys are kept with the job's
    record, and a secret's value never is."""
    envs = data.get("envs") if isinstance(data.get("envs"), dict) else {}
    secrets = data.get("secrets") if isinstance(data.get("secrets"), dict) else {}
    values = {str(k): ("true" if v else "false") if isinstance(v, bool) else str(v)
              for k, v in (envs or {}).items() if v is not None}

    def fill(path: tuple, value):
        if isinstance(value, str):
            for name in _VAR.findall(value):
                if (secrets or {}).get(name) is not None and name not in values:
                    raise SpecError(src.file, src.line_of(path), ".".join(map(str, path)),
                                    f"uses the secret {name}: orch keeps this key with the "
                                    "job's record, and never a secret's value",
                                    f"put the path or bucket name in envs (envs.{name}), or "
                                    "read the secret in the job's run or setup")
            return _VAR.sub(lambda m: values.get(m.group(1), m.group(0)), value)
        if isinstance(value, dict):
            return {fill(path + (k,), k): fill(path + (k,), v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(path + (i,), v) for i, v in enumerate(value)]
        return value

    for key in SUBSTITUTED:
        if data.get(key) is not None:
            data[key] = fill((key,), data[key])


def _check_together(spec: JobSpec, src: SourceMap) -> None:
    """Checks across keys, or of mapping keys, located at the key they are about."""
    def refuse(path: tuple, problem: str, hint: Optional[str] = None) -> SpecError:
        return SpecError(src.file, src.line_of(path), ".".join(map(str, path)), problem, hint)

    # What SkyPilot's Task.set_file_mounts refuses only at launch, after orch recorded the job.
    for dest, source in spec.file_mounts.items():
        if "://" in dest:
            raise refuse(("file_mounts", dest), "a destination is a path on the VM, not a "
                         "bucket", "write it as {/path/on/vm: s3://bucket/path}")
        for what, path in (("destination", dest), ("source", source)):
            if isinstance(path, str) and path.endswith("/"):
                raise refuse(("file_mounts", dest), f"the {what} {clip(path)} ends with '/', "
                             "which SkyPilot refuses", "remove the trailing '/'")


def _same_place(a: Optional[str], b: Optional[str]) -> bool:
    """Whether two dotted keys are the same place, or one holds the other."""
    if a is None or b is None:
        return a == b
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def default_name(file: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "-", Path(file).stem).strip("-.") or "job"
    return stem[:63]


def _pick_error(errors: list[ErrorDetails]) -> ErrorDetails:
    """Of pydantic's errors for a union, show the one that reached deepest, then the first."""
    return max(errors, key=lambda e: len([p for p in e["loc"] if p not in _UNION_TAGS]))


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


def _describe(err: ErrorDetails, allowed: list[str]) -> tuple[str, Optional[str]]:
    """The problem and hint shown for one pydantic error, in orch's words."""
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
        msg = f"{msg} (got {clip(inp)})"
    return msg, None
