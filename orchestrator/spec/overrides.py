"""SkyPilot's command-line habits for a job file's envs and secrets.

`--env KEY=VALUE` (repeatable; `--env KEY` takes the value from this shell), `--env-file
FILE` (KEY=VALUE lines) and `--secret KEY=VALUE` (or `--secret KEY`) set values over the
file's `envs:` and `secrets:`, as `sky launch` does. An env the file leaves without a value
must be given this way: SkyPilot refuses to launch it otherwise, and so does orch.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from orchestrator.base.errors import InputError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Overrides:
    envs: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.envs or self.secrets)


def _assignment(item: str, flag: str, environ: Mapping[str, str]) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not _NAME.match(key):
        raise InputError(f"{flag} {item!r}: {key!r} is not an environment variable name",
                         f"write it as {flag} NAME=VALUE (letters, digits and _)")
    if not sep:  # `--env KEY`: this shell's value, as SkyPilot does
        if key not in environ:
            raise InputError(f"{flag} {key}: no value given and {key} is not set in this shell",
                             f"give it as {flag} {key}=VALUE, or export {key} first")
        value = environ[key]
    return key, value


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines; blank lines, `# comments` and a leading `export ` are allowed, and
    a value in matching quotes loses them."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"--env-file {path}: cannot read it ({e})",
                         "give a UTF-8 text file of KEY=VALUE lines") from None
    out = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _NAME.match(key):
            raise InputError(f"{path}:{n}: {raw.strip()[:60]!r} is not a KEY=VALUE line",
                             "write one NAME=VALUE a line (# starts a comment)")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key] = value
    return out


def overrides(env: list[str], env_file: Optional[Path], secret: list[str],
              environ: Optional[Mapping[str, str]] = None) -> Overrides:
    """What the command line sets: the env file first, then each --env (later wins)."""
    environ = os.environ if environ is None else environ
    envs = read_env_file(env_file) if env_file is not None else {}
    envs.update(_assignment(item, "--env", environ) for item in env)
    secrets = dict(_assignment(item, "--secret", environ) for item in secret)
    return Overrides(envs, secrets)
