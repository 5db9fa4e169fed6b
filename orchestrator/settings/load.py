"""Loading the settings: the TOML file and ORCH_* variables, with each error located at the
file line or the environment variable that set the bad value."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

import tomllib
from pydantic import ValidationError
from pydantic_settings import SettingsError

from orchestrator.base.errors import InputError
from orchestrator.base.inputs import NotRegularFile, clip, read_regular
from orchestrator.settings.model import Settings

DEFAULT_CONFIG = "~/.config/orch/config.toml"
MAX_BYTES = 1 << 20  # a settings file is a few KiB


def config_path(environ: Optional[Mapping[str, str]] = None) -> Path:
    """The settings file: ORCH_CONFIG, else ~/.config/orch/config.toml."""
    env = os.environ if environ is None else environ
    return Path(os.path.expanduser(env.get("ORCH_CONFIG") or DEFAULT_CONFIG))


def _read_toml(path: Path) -> tuple[dict, str]:
    """The file's settings and its text (to find a key's line); ({}, "") when it is absent
    or is /dev/null (the usual way to say "no settings file")."""
    if str(path) == os.devnull:
        return {}, ""
    try:
        raw = read_regular(path, MAX_BYTES + 1)  # bounded: ORCH_CONFIG may name a huge file
    except FileNotFoundError:
        return {}, ""
    except NotRegularFile as e:  # a FIFO would block orch, a device may never end
        raise InputError(f"{path}: is {e}, not a settings file", "point ORCH_CONFIG at orch's "
                         "TOML settings file (see infra/onprem/orch.toml.example)") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read the settings file: {e}") from None
    if len(raw) > MAX_BYTES:
        raise InputError(f"{path}: the settings file is over {MAX_BYTES:,} bytes",
                         "point ORCH_CONFIG at orch's settings file (see infra/onprem/orch.toml.example)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: is not UTF-8 text "
                         f"(byte {e.start} is {raw[e.start]:#04x})", "save it as UTF-8") from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"at line (\d+)", str(e))
        raise InputError(f"{path}{':' + m.group(1) if m else ''}: TOML syntax error: {e}",
                         "fix the file or point ORCH_CONFIG at another one") from None
    except RecursionError:  # tomllib recurses once per nesting level
        raise InputError(f"{path}: TOML nested too deeply", "settings are at most a few "
                         "levels deep; see infra/onprem/orch.toml.example") from None
    except ValueError as e:  # e.g. an integer longer than Python converts (4300 digits)
        raise InputError(f"{path}: TOML value error: {e}") from None


def _key_parts(key: str) -> tuple:
    return tuple(p.strip().strip("'\"") for p in key.split("."))


def _line_of(text: str, loc: tuple) -> str:
    """':N' for the line of the file that sets `loc` (or its nearest enclosing table)."""
    loc = tuple(str(p) for p in loc)
    best, best_len, table = "", 0, ()
    arrays: dict[tuple, int] = {}  # [[array]] table -> the index of its latest entry
    for i, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if line.startswith("[["):
            parts = _key_parts(line[2:].split("]]", 1)[0])
            arrays[parts] = arrays.get(parts, -1) + 1
            here = table = parts + (str(arrays[parts]),)
        elif line.startswith("["):
            here = table = _key_parts(line[1:].split("]", 1)[0])
        elif "=" in line and not line.startswith("#"):
            here = table + _key_parts(line.split("=", 1)[0])
        else:
            continue
        if len(here) > best_len and loc[:len(here)] == here:
            best, best_len = f":{i}", len(here)
    return best


def _env_var(loc: tuple, names: list[str]) -> str:
    """The ORCH_* variable that set the value at `loc` (ORCH_LOCAL__WATTS for local.watts)."""
    loc = tuple(str(p).lower() for p in loc)

    def shared(name: str) -> int:  # how many leading parts of `loc` the name spells out
        parts = name[len("ORCH_"):].lower().split("__")
        return next((i for i, (a, b) in enumerate(zip(parts, loc)) if a != b), min(len(parts), len(loc)))

    fits = [n for n in names if shared(n) > 0]
    if not fits:
        return f"ORCH_{loc[0].upper() if loc else ''}"
    return max(fits, key=lambda n: (shared(n), -len(n)))


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment and the TOML file; one clear InputError if invalid."""
    path = config_path()
    data, text = _read_toml(path)
    # Checked before pydantic sees them: a key such as `_env_file` or `_cli_parse_args` would
    # otherwise reach BaseSettings.__init__ as one of its own options.
    for key in data:
        if key not in Settings.model_fields:
            close = difflib.get_close_matches(key, list(Settings.model_fields), n=1)
            raise InputError(f"{path}{_line_of(text, (key,))}: unknown setting {clip(key)}",
                             (f"did you mean {close[0]!r}? " if close else "")
                             + "`orch config show` lists every setting with its default")
    data.update(overrides)
    env_names = [k for k in os.environ
                 if k.upper().startswith("ORCH_") and k.upper() != "ORCH_CONFIG"]
    env_keys = {k[len("ORCH_"):].lower().split("__")[0] for k in env_names}
    try:
        settings = Settings(**data)
    except SettingsError as e:  # an ORCH_* value that should be JSON and is not
        m = re.search(r'field "([^"]+)"', str(e))
        field = m.group(1) if m else ""
        var = _env_var((field,), env_names)
        raise InputError(f"environment variable {var}: {field}: not a valid JSON value "
                         f"({e.__cause__ or e})", f"write it as JSON, or set {field} in {path} "
                         "instead") from None
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        top = str(err["loc"][0]) if err["loc"] else ""
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown setting '{key}'"
        if top in env_keys:
            where = f"environment variable {_env_var(err['loc'], env_names)}"
        else:
            where = f"{path}{_line_of(text, err['loc'])}"
        raise InputError(f"{where}: {clip(key, quote=False)}: {clip(msg, 300, quote=False)}",
                         "`orch config show` lists every setting with its default") from None
    sources = {}
    for name in Settings.model_fields:
        if name in env_keys:
            sources[name] = f"env ORCH_{name.upper()}"
        elif name in overrides:
            sources[name] = "argument"
        elif name in data:
            sources[name] = str(path)
    settings._sources = sources
    return settings
