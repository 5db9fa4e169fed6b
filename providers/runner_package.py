"""orch's runner (the `jobs` package) as a target gets it: under its shipped name
(`jobs.SHIPPED_AS`), so that a job's own `jobs` package neither shadows it nor is shadowed.

`module` names what a backend starts there; `link_in` makes a folder that holds the runner
under that name, for a Python path (the local Ray) or a Ray py_modules upload (on-prem).
"""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
from pathlib import Path

import jobs

NAME = jobs.SHIPPED_AS
SOURCE = Path(jobs.__file__).resolve().parent  # this install's runner


def module(name: str) -> str:
    """The runner's module `name` (runner, host, multinode, secret_env) as a target imports it."""
    return f"{NAME}.{name}"


def link_in(parent: Path) -> Path:
    """`parent`, holding NAME: a symbolic link to this install's runner (made, or replaced
    when it names another). On a Python path, `import NAME` is then the runner."""
    parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    link = parent / NAME
    if not (link.is_symlink() and Path(os.readlink(link)) == SOURCE):
        tmp = parent / f".{NAME}-{secrets.token_hex(4)}"
        tmp.symlink_to(SOURCE, target_is_directory=True)
        tmp.replace(link)  # atomic: a process importing it sees the old link or the new
    return parent


@functools.lru_cache(maxsize=1)
def runner_digest() -> str:
    """A digest of this install's runner (every module's name and text): a long-lived process
    started from another version of it (the local Ray's runner host) is told apart by it."""
    h = hashlib.sha256()
    for path in sorted(SOURCE.rglob("*.py")):
        h.update(str(path.relative_to(SOURCE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]
