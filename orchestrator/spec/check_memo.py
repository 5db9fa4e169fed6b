"""Entrypoint checks that passed, remembered by the job's fingerprint and the Python that ran
them, so a plan or submit of unchanged code imports nothing again (orchestrator/spec/checks.py).

One JSON file under ORCH_HOME holds digests only (a fingerprint's config may hold values a
user would not print). Written whole or not at all, read and changed under a lock on its
folder (flock: two processes remembering at once both keep their passes). A file or folder
that cannot be read, locked or written costs a check, never an error.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from orchestrator.base import skycache

VERSION = 1
KEEP = 512  # the most recent passes kept


def memo_path(home: Path) -> Path:
    return home / "cache" / "entrypoints.json"


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Held while one process reads and rewrites the memo; where the folder cannot be made
    or locked, the write goes on unlocked (the last writer's view stays)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # and the lock with it


class CheckMemo:
    """The passes remembered in `path`, for a job whose fingerprint is `fingerprint` (code,
    command and config: orchestrator/service/fingerprint.py)."""

    def __init__(self, path: Path, fingerprint: str):
        self.path, self.fingerprint = path, fingerprint

    def _key(self, entrypoint: str, where: Path) -> str:
        # `where`: the folder the check imports from; the Python that imports it, with its
        # version (a venv's python is a link that may come to point at another one).
        doc = [VERSION, self.fingerprint, entrypoint, str(where), sys.executable, sys.version]
        return hashlib.sha256(json.dumps(doc).encode()).hexdigest()

    def _read(self) -> dict[str, float]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        passed = data.get("passed") if isinstance(data, dict) and data.get("version") == VERSION else None
        if not isinstance(passed, dict):
            return {}
        return {k: v for k, v in passed.items() if isinstance(k, str) and isinstance(v, (int, float))}

    def passed(self, entrypoint: str, where: Path) -> bool:
        """Whether this entrypoint passed here before, for this fingerprint and Python."""
        return self._key(entrypoint, where) in self._read()

    def remember(self, entrypoint: str, where: Path, now: Optional[float] = None) -> None:
        with _locked(self.path.parent):
            passed = self._read()
            passed[self._key(entrypoint, where)] = round(time.time() if now is None else now, 3)
            newest = sorted(passed.items(), key=lambda kv: kv[1], reverse=True)[:KEEP]
            skycache.write_json(self.path, {"version": VERSION, "passed": dict(newest)})
