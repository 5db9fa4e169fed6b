"""A job's workdir sent by a client to `orch serve`: packed here, unpacked there, safely.

The client packs the workdir into a tar.gz: every file, folder and inward link under it,
except anything named like the folders orch never fingerprints (.git, __pycache__, .venv,
venv, node_modules and a few caches) and what a `.orchignore` at its top names (one glob a
line: `data/`, `*.ckpt`, `logs/*.txt`). The archive is reproducible (sorted, no owner, a fixed gzip header), so its
sha256 names its content: a resubmit of the same files finds them on the server and sends
nothing.

The server trusts nothing in an archive: names must be relative and stay inside (no `..`),
links must be relative and resolve inside, only files, folders and links are allowed, and
the number and total size of the files are capped by the archive's own headers, before
each file is written. What it unpacks is readable by the server's user only, in
HOME/uploads/<sha256 of the archive>, until no job or schedule needs it and it has not been
used for `upload_keep_hours` (`orchestrator.upload_gc` removes it then).
"""

from __future__ import annotations

import errno
import fnmatch
import gzip
import hashlib
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional

from orchestrator.errors import InputError, OrchError
from orchestrator.fingerprint import _SKIP_DIRS as SKIP_DIRS  # the same folders, both places

MiB = 1 << 20
MAX_FILES = 100_000
IGNORE_FILE = ".orchignore"
DIGEST_PATTERN = r"^[0-9a-f]{64}$"


class TooLarge(InputError):
    """An upload over the size or file-count limit (HTTP 413)."""


def human(n: float) -> str:
    if n < 1024:
        return f"{int(n)} bytes"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


# -- the client: what to send ------------------------------------------------------------

def local_workdir(spec) -> Optional[Path]:
    """The folder a client uploads for this job: its workdir, resolved from the job file's
    folder as orch does alone. None: no workdir, or an absolute path this machine does not
    have, which is taken to be the server's own (a filesystem both see)."""
    if spec.workdir is None:
        return None
    if "://" in spec.workdir:
        raise spec.error("workdir", f"{spec.workdir!r} is a URL; a workdir is a folder",
                         "orch sends the workdir from this machine to the server; data in object "
                         "storage goes in file_mounts, e.g. file_mounts: {/data: s3://bucket/data}")
    path = spec.workdir_path()
    if path.is_dir():
        return path
    if Path(spec.workdir).expanduser().is_absolute():
        return None
    raise spec.error("workdir", f"{path} is not a directory", "paths are relative to the job "
                     "file's folder")


def read_ignore(workdir: Path) -> list[str]:
    """The patterns of `workdir/.orchignore`: one a line, `#` starts a comment line."""
    path = workdir / IGNORE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read it: {e}", "a .orchignore is UTF-8 text, one "
                         "pattern a line") from None
    lines = (line.strip() for line in text.splitlines())
    return [line.strip("/") for line in lines if line and not line.startswith("#") and line.strip("/")]


def ignored(rel: str, patterns: list[str]) -> bool:
    """A pattern with a '/' matches the path from the workdir's top, one without matches
    any file or folder of that name; a matched folder is left out whole."""
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(rel if "/" in p else name, p) for p in patterns)


def link_inside(rel: str, target: str) -> bool:
    """Whether a link at `rel` (relative to the top) pointing at `target` stays inside, by
    its text alone."""
    if not target or target.startswith("/"):
        return False
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    return joined != ".." and not joined.startswith("../")


@dataclass
class Entry:
    rel: str
    path: Path
    kind: str  # "dir", "file" or "link"
    size: int = 0
    mode: int = 0o644
    mtime: float = 0.0
    target: str = ""


def scan(workdir: Path) -> tuple[list[Entry], list[str]]:
    """What goes into the archive, in order, and what was left out that a user may not
    expect to be (links pointing outside, sockets and devices)."""
    patterns = read_ignore(workdir)
    top = os.path.realpath(workdir)
    entries: list[Entry] = []
    left_out: list[str] = []

    def fail(e: OSError):
        raise InputError(f"cannot read {e.filename}: {e.strerror}",
                         f"make it readable, or leave it out with a line in {workdir / IGNORE_FILE}")

    for root, dirs, files in os.walk(workdir, onerror=fail):
        keep = []
        for name in sorted(dirs + files):
            path = Path(root, name)
            rel = path.relative_to(workdir).as_posix()
            if name in SKIP_DIRS or ignored(rel, patterns):  # folders, files or links
                continue
            try:
                st = path.lstat()
            except OSError as e:
                fail(e)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(path)
                real = os.path.realpath(path)
                if link_inside(rel, target) and (real == top or real.startswith(top + os.sep)):
                    entries.append(Entry(rel, path, "link", mtime=st.st_mtime, target=target))
                else:
                    left_out.append(f"{rel} (a link to {target}, outside the workdir)")
            elif stat.S_ISDIR(st.st_mode):
                entries.append(Entry(rel, path, "dir", mode=st.st_mode, mtime=st.st_mtime))
                keep.append(name)
            elif stat.S_ISREG(st.st_mode):
                entries.append(Entry(rel, path, "file", st.st_size, st.st_mode, st.st_mtime))
            else:
                left_out.append(f"{rel} (not a file, folder or link)")
        dirs[:] = [d for d in dirs if d in keep]  # os.walk descends only into these, sorted
        dirs.sort()
    return entries, left_out


@dataclass
class Packed:
    """A packed workdir: the archive (a temporary file, at its start) and what it holds."""

    file: BinaryIO
    digest: str  # sha256 of the archive's bytes
    size: int  # the archive's bytes
    files: int
    content: int  # the files' bytes
    left_out: list[str]

    def close(self) -> None:
        self.file.close()


def _too_large(workdir: Path, what: str, limit: int, entries: list[Entry]) -> TooLarge:
    by_top: dict[str, int] = {}
    for e in entries:
        if e.kind == "file":
            head, _, rest = e.rel.partition("/")
            key = head + "/" if rest else head
            by_top[key] = by_top.get(key, 0) + e.size
    biggest = sorted(by_top.items(), key=lambda kv: -kv[1])[:3]
    shown = ", ".join(f"{k} {human(v)}" for k, v in biggest)
    return TooLarge(f"the workdir {workdir} {what}; the upload limit is {human(limit)}"
                    + (f" (largest: {shown})" if shown else ""),
                    f"leave out what the job does not need with lines in {workdir / IGNORE_FILE} "
                    "(e.g. data/ or *.ckpt), put data in file_mounts (s3://), or raise "
                    "upload_max_mb (ORCH_UPLOAD_MAX_MB) on this machine and the server")


def pack(workdir: Path, max_bytes: int) -> Packed:
    """The workdir as a reproducible tar.gz; TooLarge when its files, or the archive, are
    over `max_bytes`. Nothing is sent from here."""
    workdir = Path(workdir)
    entries, left_out = scan(workdir)
    files = [e for e in entries if e.kind == "file"]
    content = sum(e.size for e in files)
    if content > max_bytes:
        raise _too_large(workdir, f"holds {human(content)} in {len(files)} files", max_bytes, entries)
    if len(entries) > MAX_FILES:
        raise TooLarge(f"the workdir {workdir} holds {len(entries):,} files and folders; an "
                       f"upload holds at most {MAX_FILES:,}",
                       f"leave some out with lines in {workdir / IGNORE_FILE}")
    out = tempfile.TemporaryFile()
    try:
        with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for e in entries:
                    info = tarfile.TarInfo(e.rel)
                    info.mtime, info.uid, info.gid, info.uname, info.gname = int(e.mtime), 0, 0, "", ""
                    info.mode = 0o755 if e.kind == "dir" or e.mode & 0o100 else 0o644
                    if e.kind == "dir":
                        info.type = tarfile.DIRTYPE
                        tar.addfile(info)
                    elif e.kind == "link":
                        info.type, info.linkname = tarfile.SYMTYPE, e.target
                        tar.addfile(info)
                    else:
                        info.size = e.size
                        with open(e.path, "rb") as f:
                            tar.addfile(info, f)
        size = out.tell()
        if size > max_bytes:
            raise _too_large(workdir, f"packs into {human(size)} (its files: {human(content)})",
                             max_bytes, entries)
        out.seek(0)
        digest = hashlib.sha256()
        for chunk in iter(lambda: out.read(MiB), b""):
            digest.update(chunk)
        out.seek(0)
        return Packed(out, digest.hexdigest(), size, len(files), content, left_out)
    except OSError as e:  # unreadable, or changed while it was read
        out.close()
        raise InputError(f"cannot pack the workdir {workdir}: {e.filename or ''} {e.strerror or e}".strip(),
                         "a file that changes while orch reads it: try again; one orch cannot "
                         f"read: leave it out with a line in {workdir / IGNORE_FILE}") from None
    except BaseException:
        out.close()
        raise


# -- the server: receive and unpack --------------------------------------------------------

def uploads_root(home: Path) -> Path:
    return Path(home) / "uploads"


def missing(digest: str) -> InputError:
    """The error for an upload this server does not have (never had, or removed as unused):
    a client that gets it sends the workdir again (`Remote` does, once)."""
    return InputError(f"upload {digest[:16]}... is not on this server",
                      "send the workdir first: POST /v1/uploads (orch submit does)")


def touch(path: Path) -> bool:
    """Mark an upload as used now (its mtime is its "last used" for the collector, see
    `upload_gc`); False when it is not there (removed this instant)."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    except OSError:
        pass  # not ours to touch (another user's folder): it is there all the same
    return path.is_dir()


def folder(home: Path, digest: str) -> Path:
    """Where the upload `digest` is unpacked, marked as used now; InputError when this
    server does not have it."""
    import re

    path = uploads_root(home) / digest
    if not re.match(DIGEST_PATTERN, digest) or not touch(path):
        raise missing(digest)
    return path


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
    return "/".join(parts) or None


def _inside(top: str, path: str) -> bool:
    return path == top or path.startswith(top + os.sep)


def unpack(archive: BinaryIO, dest: Path, max_bytes: int, max_files: int = MAX_FILES) -> dict:
    """Unpack a tar.gz into `dest` (created here, owner-only), all or nothing: on any
    problem `dest` is removed and InputError (TooLarge for the limits) raised."""
    dest = Path(dest)
    dest.mkdir(mode=0o700)
    try:
        with tarfile.open(fileobj=archive, mode="r:gz") as tar:
            stats = _extract(tar, os.path.realpath(dest), max_bytes, max_files)
        os.chmod(dest, 0o700)
        return stats
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        shutil.rmtree(dest, ignore_errors=True)
        raise InputError(f"the upload is not a readable tar.gz archive: {e}",
                         "send a gzip-compressed tar of the workdir (`orch submit` makes one)") from None
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
        if count > max_files:
            raise TooLarge(f"the upload holds over {max_files:,} entries", "leave files out of "
                           "the workdir with a .orchignore")
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
                raise TooLarge(f"the upload's files are over the limit of {human(max_bytes)}",
                               "leave files out of the workdir with a .orchignore, or raise "
                               "upload_max_mb on the server")
            path = _place(top, rel)
            try:  # never through or over something already there
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o700 if m.mode & 0o100 else 0o600)
            except FileExistsError:
                raise _bad(rel, "is in the archive twice") from None
            with os.fdopen(fd, "wb") as out:
                src = tar.extractfile(m)
                shutil.copyfileobj(src, out, MiB)
            os.utime(path, (m.mtime, m.mtime), follow_symlinks=False)
            files += 1
        elif m.type == tarfile.SYMTYPE:
            if not link_inside(rel, m.linkname):
                raise _bad(rel, f"is a link to {m.linkname!r}, outside the upload")
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


class Receiver:
    """An upload arriving in pieces: hashed and written to a private temporary file as it
    comes, refused as soon as it is over the limit, then unpacked under HOME/uploads."""

    def __init__(self, home: Path, max_bytes: int):
        self.root = uploads_root(home)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.max_bytes = max_bytes
        self.file = tempfile.TemporaryFile(dir=self.root)
        self.sha = hashlib.sha256()
        self.size = 0

    def refuse(self, size: int) -> TooLarge:
        return TooLarge(f"the upload is {human(size)}; this server takes at most "
                        f"{human(self.max_bytes)}", "leave files out of the workdir with a "
                        ".orchignore, or raise upload_max_mb (ORCH_UPLOAD_MAX_MB) on the server")

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise self.refuse(self.size)
        self.sha.update(chunk)
        self.file.write(chunk)

    def finish(self) -> dict:
        """{"upload": digest, "existing": bool}: unpacked into HOME/uploads/<digest>, or
        already there (the same bytes were sent before)."""
        digest = self.sha.hexdigest()
        final = self.root / digest
        if touch(final):  # False: never here, or removed this instant (unpacked again below)
            return {"upload": digest, "existing": True}
        if self.size == 0:
            raise InputError("the upload is empty", "send a tar.gz of the workdir as the body")
        self.file.seek(0)
        unpacking = self.root / f".unpacking-{uuid.uuid4().hex}"
        unpack(self.file, unpacking, self.max_bytes)
        os.utime(unpacking)  # unpacked now: the collector's "last used" starts here
        try:
            os.rename(unpacking, final)
        except OSError:
            shutil.rmtree(unpacking, ignore_errors=True)
            if not final.is_dir():
                raise
            return {"upload": digest, "existing": True}  # the same bytes, sent meanwhile
        return {"upload": digest, "existing": False}

    def close(self) -> None:
        self.file.close()


# -- the job file: its workdir pointed at the upload ------------------------------------

def set_workdir(text: str, path: str) -> str:
    """The job file's text with its top-level `workdir:` value replaced by `path`, every
    other byte (comments, line numbers) kept; ValueError when it has no workdir."""
    import json

    import yaml

    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == "workdir":
                start, end = value.start_mark.index, value.end_mark.index
                tail = "\n" if text[start:end].endswith("\n") else ""  # a block scalar's end
                return text[:start] + json.dumps(path) + tail + text[end:]
    raise ValueError("the job file has no workdir")


def with_upload(text: str, spec, home: Path, digest: str) -> str:
    """The job file's text run from the upload `digest` on this server."""
    path = folder(home, digest)
    if spec.workdir is None:
        raise spec.error("workdir", "an upload came with this job, but it has no workdir: "
                         "nothing would use it", "give workdir: in the job file, or send no upload")
    return set_workdir(text, str(path))
