"""Which instance or cluster ran a job: a small JSON file (job id -> owner's name) that the
per-user providers (`providers/isolated.py` on this machine, `providers/onprem_users.py` on
the owned cluster) keep beside their instances, written whole (a rename) and updated under
an exclusive lock, so two `orch` processes never lose each other's entries."""

from __future__ import annotations

import contextlib
import fcntl
import json
from pathlib import Path
from typing import Iterator


def read_index(path: Path) -> dict[str, str]:
    """The index, or {} when it is missing or unreadable (a lost index only forgets which
    instance ran a finished job; orch's store keeps the job)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_index(path: Path, index: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(index))
    tmp.replace(path)


@contextlib.contextmanager
def locked(lock_file: Path) -> Iterator[None]:
    """Hold `lock_file` exclusively (its folder made 0700 where missing)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(lock_file, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
