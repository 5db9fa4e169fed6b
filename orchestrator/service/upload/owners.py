"""Whose uploads are whose on `orch serve`, and how much of its disk each user's hold.

An upload belongs to every user who sent its bytes: only they (and admins) may run a job
from it or learn that the server has it. Each upload's record is
HOME/uploads/.owners/<digest>.json, {"version": 1, "bytes": its unpacked files' bytes,
"owners": [names]}, written whole to a temporary file and renamed over the old one (a crash
leaves one or the other), changed under a lock on the folder (flock: threads and processes
alike), and removed by `orchestrator.service.upload_gc` with the upload. The quota
(upload_quota_mb) counts, for each user, every upload they own: its files' bytes and 4 KiB
for each entry (`receive.counted`), on every replica (where replicas share a store, its count
of the user's uploads, when it is more than this replica's).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from orchestrator.service.upload.limits import TooLarge, human

DIR = ".owners"
VERSION = 1
_TEMP = ".tmp-"


@dataclass(frozen=True)
class Record:
    bytes: int
    owners: tuple[str, ...]


def _path(root: Path, digest: str) -> Path:
    return Path(root) / DIR / f"{digest}.json"


@contextmanager
def _locked(root: Path) -> Iterator[Path]:
    folder = Path(root) / DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield folder
    finally:
        os.close(fd)  # and the lock with it


def read(root: Path, digest: str) -> Optional[Record]:
    """The upload's record; None when it has none (or one this version cannot read:
    nobody then owns it, and its owners get it again by sending it)."""
    try:
        data = json.loads(_path(root, digest).read_text(encoding="utf-8"))
        if data.get("version") != VERSION:
            return None
        return Record(int(data["bytes"]), tuple(str(o) for o in data["owners"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write(folder: Path, digest: str, record: Record) -> None:
    temp = folder / f"{_TEMP}{uuid.uuid4().hex}"
    with open(temp, "w", encoding="utf-8") as f:
        json.dump({"version": VERSION, "bytes": record.bytes, "owners": list(record.owners)}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, folder / f"{digest}.json")


def owns(root: Path, digest: str, user: str) -> bool:
    record = read(root, digest)
    return record is not None and user in record.owners


def held(root: Path, user: str, besides: Optional[str] = None) -> int:
    """The bytes of every upload `user` owns (but the upload `besides`)."""
    total = 0
    try:
        names = os.listdir(Path(root) / DIR)
    except FileNotFoundError:
        return 0
    for name in names:
        if name.endswith(".json") and name != f"{besides}.json":
            record = read(root, name[:-len(".json")])
            if record is not None and user in record.owners:
                total += record.bytes
    return total


def over_quota(user: str, total: int, size: int, quota: int, keep_hours: float) -> TooLarge:
    kept = (f"once unused for upload_keep_hours ({keep_hours:g} h here)" if keep_hours > 0
            else "never here (upload_keep_hours is 0)")
    return TooLarge(f"{user}'s uploads on this server hold {human(total)}; this one "
                    f"({human(size)}, 4 KiB counted for each file and folder) would be over "
                    f"the upload quota of {human(quota)}",
                    f"uploads no unfinished job or schedule needs are removed {kept}; leave "
                    "files out with a .orchignore, or ask the server's admin to raise "
                    "upload_quota_mb (ORCH_UPLOAD_QUOTA_MB)")


def check(root: Path, digest: str, user: str, size: int, quota: int,
          keep_hours: float = 24.0, elsewhere: int = 0) -> None:
    """TooLarge when owning the upload (`size` counted) would take `user` over `quota`
    bytes (0: no quota); `elsewhere`: what the user's other uploads hold on every replica."""
    if quota > 0:
        total = max(held(root, user, besides=digest), elsewhere)
        if total + size > quota:
            raise over_quota(user, total, size, quota, keep_hours)


def claim(root: Path, digest: str, user: str, size: int, quota: int,
          keep_hours: float = 24.0, elsewhere: int = 0) -> bool:
    """Make `user` an owner of the upload, within their quota (`check`); False when they
    were one already."""
    with _locked(root) as folder:
        record = read(root, digest)
        if record is not None and user in record.owners:
            return False
        check(root, digest, user, size, quota, keep_hours, elsewhere)
        _write(folder, digest, Record(size, (record.owners if record else ()) + (user,)))
        return True


def adopt(root: Path, digest: str, size: int, names: list[str]) -> None:
    """Record the owners of an upload another replica received (its quota was checked
    there), with any this replica knew already."""
    with _locked(root) as folder:
        record = read(root, digest)
        known = record.owners if record else ()
        _write(folder, digest, Record(size, known + tuple(n for n in names if n not in known)))


def release(root: Path, digest: str, user: str) -> None:
    """Undo `claim` (the upload it was for could not be unpacked)."""
    with _locked(root) as folder:
        record = read(root, digest)
        if record is None or user not in record.owners:
            return
        rest = tuple(o for o in record.owners if o != user)
        if rest:
            _write(folder, digest, Record(record.bytes, rest))
        else:
            _path(root, digest).unlink(missing_ok=True)


def forget(root: Path, digest: str) -> None:
    """Remove the record of an upload that is gone."""
    with _locked(root):
        _path(root, digest).unlink(missing_ok=True)


def leftovers(root: Path, present: set[str], now: Optional[float] = None,
              max_age_s: float = 3600.0) -> list[str]:
    """Records of uploads that are not there (a server stopped between the two) and
    temporary files, unchanged for `max_age_s`: removed; their names."""
    now = time.time() if now is None else now
    folder = Path(root) / DIR
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    removed = []
    with _locked(root):
        for name in names:
            if name.endswith(".json"):
                if name[:-len(".json")] in present:
                    continue
            elif not name.startswith(_TEMP):
                continue  # not ours
            try:
                if now - os.stat(folder / name).st_mtime > max_age_s:
                    os.unlink(folder / name)
                    removed.append(name)
            except FileNotFoundError:
                continue
    return removed
