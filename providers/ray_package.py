"""A job's workdir packed as Ray's Jobs client packs a working_dir, without importing Ray.

Why: Ray's client (`ray.job_submission`) imports Ray whole, 1.0-1.3 s of each `orch submit`
on 2 cores and 4.9 s at load 30, to zip a folder and send two HTTP requests. orch packs the
folders whose package it can make the same way (providers/ray_jobs.py posts them) and
leaves the rest to Ray's client: those with ignore files, links or patterns other than
orch's own '/path' ones, and large ones.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path
from typing import Optional

# A workdir orch packs itself at most this large; a larger one goes to Ray's client, with
# its limits and messages.
_PLAIN_PACKAGE_MAX = 64 << 20
# What Ray's client leaves out of every working_dir by name, at any depth (Ray 2.60's
# RAY_RUNTIME_ENV_DEFAULT_EXCLUDES), unless RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES says other.
_RAY_LEAVES_OUT = frozenset({".git", ".venv", "venv", "__pycache__"})


class _NotPlain(Exception):
    """A workdir that Ray's client packs: ignore files, links, patterns or size."""


def plain_package(top: Path, excludes) -> Optional[bytes]:
    """The zip Ray's client makes of the folder `top` (its files and empty folders, paths
    from `top`, less what Ray leaves out by name), when orch can make the same without Ray's packing code: no
    `.gitignore` or `.rayignore` in it (Ray applies those), no links, only '/path' patterns
    left out (orch's own), at most _PLAIN_PACKAGE_MAX bytes. None otherwise."""
    if "RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES" in os.environ:
        return None
    left = set()
    for pattern in excludes:
        if not (isinstance(pattern, str) and pattern.startswith("/")) or any(c in pattern for c in "*?[]!\\"):
            return None
        left.add(pattern.strip("/"))
    buf = io.BytesIO()
    size = 0

    def visit(path: Path, pkg: zipfile.ZipFile) -> None:
        nonlocal size
        rel = path.relative_to(top).as_posix()
        if path.is_symlink():
            raise _NotPlain
        if path.is_dir():
            if (path / ".gitignore").exists() or (path / ".rayignore").exists():
                raise _NotPlain
            children = sorted(path.iterdir())
            if not children and path != top:
                pkg.write(path, rel)
            for child in children:
                if child.name not in _RAY_LEAVES_OUT and child.relative_to(top).as_posix() not in left:
                    visit(child, pkg)
        elif path.is_file():
            size += path.stat().st_size
            if size > _PLAIN_PACKAGE_MAX:
                raise _NotPlain
            pkg.write(path, rel)

    try:
        with zipfile.ZipFile(buf, "w", strict_timestamps=False) as pkg:
            visit(top, pkg)
    except (_NotPlain, OSError):
        return None
    return buf.getvalue()
