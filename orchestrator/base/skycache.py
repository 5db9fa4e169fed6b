"""What orch reads from the installed SkyPilot, kept as JSON in the user's cache folder
(`$XDG_CACHE_HOME/orch`, else `~/.cache/orch`), one set of files per SkyPilot version.

Importing SkyPilot costs about 2-3 CPU-seconds; reading one of these files, a few
milliseconds. A process pays the import only for what no earlier one kept: the job file
schemas (orchestrator/spec/sky_schema.py), the cloud names and each price catalog's
offers (orchestrator/offers/catalog.py). A cache only: a folder that cannot be written costs the
next process that import again, never an error.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "orch"


@functools.cache  # read once a process: importlib parses the package's METADATA each call
def sky_version() -> str:  # (14 ms here; a plan looked it up 6 times, a writer test 150 times)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("skypilot")
    except PackageNotFoundError:  # pragma: no cover - skypilot is one of orch's dependencies
        return "unknown"


def path(name: str) -> Path:
    """The file `name` kept for the installed SkyPilot."""
    return cache_dir() / f"skypilot-{sky_version()}-{name}.json"


def read(name: str) -> Optional[Any]:
    """What was kept under `name`; None when nothing (or nothing readable) was."""
    try:
        return json.loads(path(name).read_text())
    except (OSError, ValueError):
        return None


def write(name: str, data: Any) -> None:
    """Keep `data` under `name`, whole or not at all (a reader never sees half a file)."""
    write_json(path(name), data)


def write_json(target: Path, data: Any) -> None:
    """Write `data` as JSON to `target`, whole or not at all, also when two processes write
    it at once (the last one's stays); a folder that cannot be written is no error."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


def kept(name: str, make: Callable[[], Any], usable: Callable[[Any], bool]) -> Any:
    """What was kept under `name` when `usable` takes it; else `make()`'s, kept for the next
    process (the one place that imports SkyPilot, inside `make`)."""
    data = read(name)
    if data is not None and usable(data):
        return data
    data = make()
    write(name, data)
    return data
