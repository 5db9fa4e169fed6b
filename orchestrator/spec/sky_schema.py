"""SkyPilot's part of a job file, checked by SkyPilot's own schemas (its task schema and its
resources schema, `sky.utils.schemas`), as `sky launch` checks a task file.

Importing SkyPilot costs about 3 s, so its two schemas are kept in the user's cache folder
(orchestrator/base/skycache.py): the first job file read under a SkyPilot version pays that
once, every later one reads the file (a few milliseconds).
"""

from __future__ import annotations

import difflib
import functools
import re
from typing import Any, Iterable, Optional

from orchestrator.base import skycache
from orchestrator.base.errors import SpecError
from orchestrator.spec.document import SourceMap


@functools.lru_cache(maxsize=1)
def schemas() -> dict[str, dict]:
    """{"task": ..., "resources": ...}: the installed SkyPilot's schemas."""
    def from_skypilot() -> dict:
        from sky.utils import schemas as sky_schemas

        return {"task": sky_schemas.get_task_schema(), "resources": sky_schemas.get_resources_schema()}

    return skycache.kept("schemas", from_skypilot,
                         lambda data: isinstance(data, dict) and {"task", "resources"} <= data.keys())


@functools.lru_cache(maxsize=1)
def _validator_class() -> Any:
    """Draft 7 with SkyPilot's two enum keywords (sky/utils/validator.py)."""
    import jsonschema

    def enum_check(lower: bool):
        def check(validator, enums, instance, schema):
            got = instance.lower() if lower and isinstance(instance, str) else instance
            if got not in [e.lower() if lower else e for e in enums]:
                yield jsonschema.ValidationError(f"{instance!r} is not one of {enums!r}")
        return check

    return jsonschema.validators.extend(
        jsonschema.Draft7Validator,
        validators={"case_insensitive_enum": enum_check(True),
                    "case_sensitive_enum": enum_check(False)})


def as_skypilot_reads(task: dict) -> dict:
    """The task part as SkyPilot validates it (Task.from_yaml_config): env and secret values
    as text, null keys left out."""
    out = {k: v for k, v in task.items() if v is not None}
    for key in ("envs", "secrets"):
        if isinstance(out.get(key), dict):
            out[key] = {str(k): None if v is None else str(v) for k, v in out[key].items()}
    return out


def problem(data: dict, src: SourceMap, orch_keys: Iterable[str]) -> Optional[SpecError]:
    """The first place where SkyPilot's schemas refuse the file's SkyPilot part (everything
    but `orch_keys`), as a SpecError; None when they accept it."""
    orch = set(orch_keys)
    task = as_skypilot_reads({k: v for k, v in data.items() if k not in orch})
    s = schemas()
    try:
        _first_error(_validator_class()(s["task"]).iter_errors(task), (), src, extra_known=orch)
        res = task.get("resources")
        if isinstance(res, dict):
            res = {k: v for k, v in res.items() if v is not None}
            _first_error(_validator_class()(s["resources"]).iter_errors(res), ("resources",), src)
    except SpecError as e:
        return e
    return None


def _first_error(errors: Iterable[Any], prefix: tuple, src: SourceMap,
                 extra_known: Iterable[str] = ()) -> None:
    # The first in the file (then by key), so a fix-and-rerun walks it top to bottom.
    found = sorted(errors, key=lambda e: (src.line_of(prefix + tuple(e.absolute_path)) or 0,
                                          list(map(str, e.absolute_path)), str(e.message)))
    if not found:
        return
    import jsonschema

    # Of an anyOf's branches, the one that came closest (SkyPilot's validate_schema does so).
    e = jsonschema.exceptions.best_match([found[0]])
    path = prefix + tuple(e.absolute_path)
    if e.validator == "additionalProperties" and isinstance(e.instance, dict):
        if e.schema.get("patternProperties"):  # envs: a name that is not a variable name
            patterns = [re.compile(p) for p in e.schema["patternProperties"]]
            bad = next(k for k in e.instance if not any(p.search(str(k)) for p in patterns))
            raise _error(src, path + (bad,), f"{bad!r} is not an environment variable name",
                         "use letters, digits and '_', not starting with a digit")
        known = set(e.schema.get("properties", {})) | (set() if e.absolute_path else set(extra_known))
        bad = next(k for k in e.instance if k not in known)
        close = difflib.get_close_matches(str(bad), sorted(known), n=1)
        hint = f"did you mean '{close[0]}'?" if close else None
        if bad == "gpus" and "accelerators" in known:  # SkyPilot's alias, at the top only
            hint = "write accelerators: here (SkyPilot reads gpus: at the top of resources only)"
        allowed = ", ".join(sorted(k for k in known if not str(k).startswith("_")
                                   and k not in ("service", "pool")))
        hint = (hint + " " if hint else "") + f"allowed here: {allowed}"
        raise _error(src, path + (bad,), f"unknown key '{bad}'", hint)
    message = e.message.replace("type 'object'", "type 'mapping'")
    raise _error(src, path, message, "SkyPilot's task schema refuses this value (as `sky launch` would)")


def _error(src: SourceMap, path: tuple, problem: str, hint: Optional[str]) -> SpecError:
    return SpecError(src.file, src.line_of(path), ".".join(map(str, path)) or None, problem, hint)
