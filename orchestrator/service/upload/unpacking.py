"""The server's side of an upload: unpack an archive it trusts nothing of.

Names must be relative and stay inside (no `..`) and name no `.git` (git, run in the
folder later, would obey a config in it), links must be relative and resolve inside, only
files, folders and links are allowed, and the number and total size of the files, and the
size of each extended header, are capped by a first pass over the headers
(`orchestrator.service.upload.headers`) before anything is written, then again while writing. What
it unpacks is readable by the server's user only.
"""

from __future__ import annotations

import errno
import gzip
import os
import posixpath
import shutil
import tarfile
import zlib
from pathlib import Path
from typing import BinaryIO, Optional

from orchestrator.base.errors import InputError, OrchError
from orchestrator.service.upload.headers import survey, too_big, too_many
from orchestrator.service.upload.limits import MAX_FILES, MiB, link_inside

UNREADABLE = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


def _bad(name: str, problem: str) -> InputError:
    return InputError(f"the upload is refused: {name!r} {problem}",
                      "an upload holds files, folders and links, all inside its top folder; "
                      "`orch submit` makes such archives")


def safe_name(name: str) -> Optional[str]:
    """A member's name, relative and normalized; None for the top folder itself."""
    if "\x00" in name:
        raise _bad(name, "has a NUL character")
    if name.startswith("/"):
        raise _bad(name, "is an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _bad(name, "climbs out with '..'")
    if _has_git(name):
        raise _git(name, "is in a .git folder")
    return "/".join(parts) or None


def _has_git(path: str) -> bool:
    return any(p.lower() == ".git" for p in path.split("/"))  # .GIT too: a case-insensitive disk


def _git(name: str, problem: str) -> InputError:
    return InputError(f"the upload is refused: {name!r} {problem}",
                      "an upload holds no git repository (`orch submit` leaves .git out); "
                      "a job that needs one names it as workdir: {url: ..., ref: ...}")


def _inside(top: str, path: str) -> bool:
    return path == top or path.startswith(top + os.sep)


def unpack(archive: BinaryIO, dest: Path, max_bytes: int, max_files: int = MAX_FILES) -> dict:
    """Unpack a tar.gz into `dest` (created here, owner-only), all or nothing: on any
    problem `dest` is removed and InputError (TooLarge for the limits) raised. The limits
    are checked on the headers first, before `dest` is created."""
    dest = Path(dest)
    try:
        survey(archive, max_bytes, max_files)
    except UNREADABLE as e:
        raise unreadable(e) from None
    dest.mkdir(mode=0o700)
    try:
        with tarfile.open(fileobj=archive, mode="r:gz") as tar:
            stats = _extract(tar, os.path.realpath(dest), max_bytes, max_files)
        os.chmod(dest, 0o700)
        return stats
    except UNREADABLE as e:
        shutil.rmtree(dest, ignore_errors=True)
        raise unreadable(e) from None
    except OSError as e:
        shutil.rmtree(dest, ignore_errors=True)
        if e.errno in (errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG):
            where = os.path.relpath(e.filename, dest) if e.filename else "?"
            raise _bad(where, f"cannot be unpacked ({e.strerror}): the archive "
                       "contradicts itself") from None
        raise OrchError(f"cannot unpack an upload under {dest.parent}: {e.strerror or e}",
                        "check the server's disk and the permissions of its ORCH_HOME") from None
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def unreadable(e: BaseException) -> InputError:
    return InputError(f"the upload is not a readable tar.gz archive: {e}",
                      "send a gzip-compressed tar of the workdir (`orch submit` makes one)")


def _place(top: str, rel: str) -> str:
    """The real path for `rel`, its folder created: refused when a link already unpacked
    would lead it outside `top`, checked before anything is created."""
    parent = os.path.realpath(os.path.join(top, posixpath.dirname(rel)))
    if not _inside(top, parent):
        raise _bad(rel, "would be written through a link to outside the upload")
    os.makedirs(parent, mode=0o700, exist_ok=True)
    return os.path.join(parent, posixpath.basename(rel))


def _extract(tar: tarfile.TarFile, top: str, max_bytes: int, max_files: int) -> dict:
    count = files = total = 0
    links: list[tuple[str, str]] = []
    for m in tar:
        count += 1
        if count > max_files:  # the first pass counted the same: a second guard
            raise too_many(max_files)
        rel = safe_name(m.name)
        if rel is None:
            if m.isdir():
                continue
            raise _bad(m.name, "names the top folder itself")
        if m.type == tarfile.DIRTYPE:
            path = os.path.realpath(os.path.join(top, rel))
            if not _inside(top, path):
                raise _bad(rel, "would be created through a link to outside the upload")
            os.makedirs(path, mode=0o700, exist_ok=True)
        elif m.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
            total += m.size
            if total > max_bytes:
                raise too_big(max_bytes)
            path = _place(top, rel)
            try:  # never through or over something already there
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o700 if m.mode & 0o100 else 0o600)
            except FileExistsError:
                raise _bad(rel, "is in the archive twice") from None
            with os.fdopen(fd, "wb") as out:
                src = tar.extractfile(m)
                assert src is not None  # a regular member always has its data
                shutil.copyfileobj(src, out, MiB)
            os.utime(path, (m.mtime, m.mtime), follow_symlinks=False)
            files += 1
        elif m.type == tarfile.SYMTYPE:
            if not link_inside(rel, m.linkname):
                raise _bad(rel, f"is a link to {m.linkname!r}, outside the upload")
            if _has_git(m.linkname):  # files written through it would make a .git folder
                raise _git(rel, f"is a link to {m.linkname!r}, a .git folder")
            path = _place(top, rel)
            try:
                os.symlink(m.linkname, path)
            except FileExistsError:
                raise _bad(rel, "is in the archive twice") from None
            links.append((rel, path))
        else:
            kind = {tarfile.LNKTYPE: "a hard link", tarfile.CHRTYPE: "a device",
                    tarfile.BLKTYPE: "a device", tarfile.FIFOTYPE: "a named pipe"}.get(
                        m.type, f"of tar type {m.type!r}")
            raise _bad(rel, f"is {kind}; only files, folders and links are allowed")
    for rel, path in links:  # every link, as it finally resolves, points inside
        if not _inside(top, os.path.realpath(path)):
            raise _bad(rel, "is a link that resolves outside the upload")
    return {"files": files, "bytes": total}
