"""`orch serve` removing the uploads nobody needs any more: a pure decision, a thin collector.

An upload folder HOME/uploads/<sha256> is removed only when all three hold:
1. no schedule in the store refers to it (its stored job file or spec names the folder);
2. no job that is not finished (PENDING, RUNNING) refers to it (`info.upload` is its
   digest, or its workdir is inside the folder);
3. it was last used more than `upload_keep_hours` ago, "last used" being the newest of the
   folder's mtime (set when it is unpacked, and again whenever a job, a plan or a resend
   names it) and the created_at / finished_at of every job that referred to it.
An upload's record of owners (`.owners/<sha256>.json`) is removed with it.
`upload_keep_hours = 0` removes no upload. Leftovers of a crash (`.unpacking-*`: a server
that stopped mid-unpack; `.removing-*`: one that stopped mid-removal; a record of owners
whose upload is not there) are removed once nothing has changed them for an hour; nothing
else in the folder is touched.

A folder is renamed to `.removing-*` before it is deleted, so no job ever sees half of it
under its real name; a job or upload that named it in the instant before the rename
touched its mtime, and the collector then puts it back instead.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from orchestrator.records import JobRow
from orchestrator.records.schedule import ScheduleRow
from orchestrator.service.upload import DIGEST_PATTERN, human, owners, uploads_root
from orchestrator.store import TERMINAL, iso

log = logging.getLogger("orch.serve")

HOUR = 3600.0
TEMP_MAX_AGE_S = HOUR  # an unpack or a removal that has not moved for this long is dead
TEMP_PREFIXES = (".unpacking-", ".removing-")
_DIGEST = re.compile(DIGEST_PATTERN)
# `uploads/<sha256>` as a path segment pair, wherever it is written (any HOME, any spelling).
_IN_UPLOAD = re.compile(r"(?:^|[/\\])uploads[/\\]+(?:\.[/\\]+)*([0-9a-f]{64})(?![0-9a-f])")


# -- the decision: data in, verdicts out -------------------------------------------------

@dataclass(frozen=True)
class Folder:
    """An entry of HOME/uploads: `at` is its mtime (an upload) or the later of its mtime
    and ctime (a temporary folder: a rename sets the ctime)."""

    name: str
    at: float


@dataclass(frozen=True)
class Use:
    """Something that refers to an upload. `active`: it needs the folder now (a schedule,
    a job not finished); `at`: when it last used it (None: a schedule, always active)."""

    digest: str
    by: str  # "job orch-1a2b3c4d (RUNNING)", "schedule sched-1a2b3c4d (nightly)"
    active: bool
    at: Optional[float] = None


@dataclass(frozen=True)
class UploadVerdict:
    name: str
    remove: bool
    reason: str
    last_used: float


def decide(folders: Iterable[Folder], uses: Iterable[Use], now: float,
           keep_hours: float) -> list[UploadVerdict]:
    """A verdict for every upload and temporary folder, in name order; other names
    (a file, a folder orch did not make) get none and are left alone."""
    by_digest: dict[str, list[Use]] = {}
    for u in uses:
        by_digest.setdefault(u.digest, []).append(u)
    out = []
    for f in sorted(folders, key=lambda f: f.name):
        if f.name.startswith(TEMP_PREFIXES):
            old = now - f.at > TEMP_MAX_AGE_S
            out.append(UploadVerdict(f.name, old, f"left by a server that stopped, unchanged since "
                               f"{iso(f.at)}" if old else "in progress", f.at))
            continue
        if not _DIGEST.match(f.name):
            continue
        refs = by_digest.get(f.name, [])
        last = max([f.at] + [u.at for u in refs if u.at is not None])
        active = [u for u in refs if u.active]
        if keep_hours <= 0:
            out.append(UploadVerdict(f.name, False, "upload_keep_hours is 0: uploads are kept", last))
        elif active:
            out.append(UploadVerdict(f.name, False, f"{active[0].by} needs it", last))
        elif now - last <= keep_hours * HOUR:
            out.append(UploadVerdict(f.name, False, f"last used {iso(last)}, within "
                               f"upload_keep_hours ({keep_hours:g})", last))
        else:
            out.append(UploadVerdict(f.name, True, f"last used {iso(last)}, no job or schedule "
                               "needs it", last))
    return out


def digests_in(text: Optional[str]) -> set[str]:
    """The uploads a path (or a job file's text) names: every `uploads/<sha256>` in it."""
    if not text:
        return set()
    found = set(_IN_UPLOAD.findall(text))
    if "/" in text or "\\" in text:
        found |= set(_IN_UPLOAD.findall(os.path.normpath(text)))  # uploads/./x, uploads//x
    return found


def _workdirs(spec: Optional[dict], source_file: Optional[str]) -> set[str]:
    """The uploads a stored spec's workdir is in: as written, and from the job file's
    folder when relative (as orch resolves it)."""
    workdir = (spec or {}).get("workdir")
    if not isinstance(workdir, str):
        return set()
    found = digests_in(workdir)
    if source_file and not os.path.isabs(workdir):
        found |= digests_in(os.path.join(os.path.dirname(source_file), workdir))
    return found


def job_uses(records: Iterable[JobRow]) -> list[Use]:
    """What jobs' records say about the uploads they use."""
    out = []
    for rec in records:
        digests = _workdirs(rec.spec, rec.source_file)
        named = rec.info.upload
        if isinstance(named, str):
            digests.add(named)
        at = max(t for t in (rec.created_at, rec.finished_at, 0.0) if t is not None)
        by = f"job {rec.id} ({rec.status})"
        out += [Use(d, by, rec.status not in TERMINAL, at) for d in sorted(digests)]
    return out


def schedule_uses(schedules: Iterable[ScheduleRow]) -> list[Use]:
    """Every upload a schedule's stored job file (or spec) names: each of its runs needs it."""
    out = []
    for s in schedules:
        digests = digests_in(s.source_text) | _workdirs(s.spec, s.source_file)
        out += [Use(d, f"schedule {s.id} ({s.name})", True) for d in sorted(digests)]
    return out


# -- the collector: the disk and the store around it ------------------------------------

def scan(root: Path) -> dict[str, tuple[Folder, int]]:
    """The folders of `root` with their times, and each one's st_mtime_ns (to tell whether
    it was touched before it was moved aside)."""
    found = {}
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return {}
    for e in entries:
        try:
            if not e.is_dir(follow_symlinks=False):
                continue
            st = e.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        temp = e.name.startswith(TEMP_PREFIXES)
        at = max(st.st_mtime, st.st_ctime) if temp else st.st_mtime
        found[e.name] = (Folder(e.name, at), st.st_mtime_ns)
    return found


def uses_in(store, folders: Iterable[Folder], now: float, keep_hours: float) -> list[Use]:
    """Every use that can change a verdict or the time a removal logs: all schedules, the
    jobs not finished, and the jobs created or finished since the oldest folder not kept by
    those (or since `keep_hours` ago, if later). A job finished before that cannot make any
    such folder's last use newer, so the store is not read whole every time."""
    every = 1_000_000
    active = store.list(limit=every, statuses=("PENDING", "RUNNING"))
    uses = schedule_uses(store.schedules()) + job_uses(active)
    if keep_hours <= 0:
        return uses
    needed = {u.digest for u in uses}
    times = [f.at for f in folders if _DIGEST.match(f.name) and f.name not in needed]
    if not times:
        return uses
    since = min(now - keep_hours * HOUR, *times)
    seen = {r.id for r in active}  # one that finished between the two reads stays active
    return uses + job_uses(r for r in store.list(limit=every, since=since) if r.id not in seen)


def _size(path: Path) -> tuple[int, int]:
    files = total = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            files += 1
            total += st.st_size
    return files, total


def _remove(root: Path, v: UploadVerdict, mtime_ns: int) -> Optional[str]:
    """Move an upload aside, then delete it: the log line, or None when it was kept after all."""
    src = root / v.name
    aside = root / f".removing-{v.name[:16]}-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(src, aside)
    except FileNotFoundError:
        return None  # gone meanwhile
    if os.stat(aside).st_mtime_ns != mtime_ns:  # named by a job or upload just now: keep it
        try:
            os.rename(aside, src)
        except OSError:  # sent again meanwhile, and unpacked anew under its name
            shutil.rmtree(aside, ignore_errors=True)
        log.info("kept upload %s...: used while it was being removed", v.name[:16])
        return None
    files, size = _size(aside)
    try:
        owners.forget(root, v.name)
        shutil.rmtree(aside)
    except OSError as e:  # out of use already; what is left goes as a leftover, in an hour
        log.warning("removing upload %s... failed: %s (in %s)", v.name[:16], e.strerror or e, aside)
        return None
    return f"removed upload {v.name[:16]}... ({files} files, {human(size)}): {v.reason}"


def collect(home: Path, store, keep_hours: float, now: float) -> list[str]:
    """Remove what `decide` says of HOME/uploads, logging each removal; what was removed."""
    root = uploads_root(home)
    folders = scan(root)
    if not folders:
        return []
    found = [f for f, _ in folders.values()]
    removed = []
    for v in decide(found, uses_in(store, found, now, keep_hours), now, keep_hours):
        if not v.remove:
            continue
        try:
            if v.name.startswith(TEMP_PREFIXES):
                shutil.rmtree(root / v.name)
                log.info("removed %s: %s", v.name, v.reason)
            else:
                line = _remove(root, v, folders[v.name][1])
                if line is None:
                    continue
                log.info("%s", line)
        except FileNotFoundError:
            continue
        except OSError as e:
            log.warning("cannot remove %s: %s; tried again later", root / v.name, e.strerror or e)
            continue
        removed.append(v.name)
    for name in owners.leftovers(root, {n for n in folders if _DIGEST.match(n)}, now, TEMP_MAX_AGE_S):
        log.info("removed %s/%s: its upload is not there", owners.DIR, name)
    return removed


def collect_shared(store, keep_hours: float, now: float) -> list[str]:
    """Remove the archives a PostgreSQL store keeps for replicas (store/shared.py) by the
    same rule as the folders, an archive's last use by any replica as its time; the
    digests removed. Run by the replica that holds the lease."""
    kept = store.kept_uploads()
    if not kept:
        return []
    found = [Folder(d, at) for d, at in kept.items()]
    removed = []
    for v in decide(found, uses_in(store, found, now, keep_hours), now, keep_hours):
        if v.remove and store.drop_upload(v.name, kept[v.name]):
            log.info("removed upload %s... from the store: %s", v.name[:16], v.reason)
            removed.append(v.name)
    return removed
