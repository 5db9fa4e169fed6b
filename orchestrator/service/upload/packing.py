"""The client's side of an upload: which files of the workdir go, packed reproducibly.

Every file, folder and inward link under the workdir goes, except anything named like the
folders orch never fingerprints (.git, __pycache__, .venv, venv, node_modules and a few
caches) and what a `.orchignore` at its top names (one glob a line: `data/`, `*.ckpt`,
`logs/*.txt`). The archive is sorted, owner-free and has a fixed gzip header, so its sha256
names its content: a resubmit of the same files finds them on the server and sends nothing.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional

from orchestrator.base.errors import InputError
from orchestrator.service.fingerprint import SKIP_DIRS  # the same folders, both places
from orchestrator.service.upload.limits import IGNORE_FILE, MAX_FILES, MiB, TooLarge, human, link_inside


def local_workdir(spec) -> Optional[Path]:
    """The folder a client uploads for this job: its workdir, resolved from the job file's
    folder as orch does alone. None: no workdir, or an absolute path this machine does not
    have, which is taken to be the server's own (a filesystem both see)."""
    if not isinstance(spec.workdir, str):  # none, or a git repository the server clones
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
            # Folders, files or links; .git in any case (the server refuses one).
            if name in SKIP_DIRS or name.lower() == ".git" or ignored(rel, patterns):
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


def pack(workdir: Path, max_bytes: int, leave: tuple[str, ...] = ()) -> Packed:
    """The workdir as a reproducible tar.gz; TooLarge when its files, or the archive, are
    over `max_bytes`. `leave`: paths from its top ('/job.yaml') never packed. Nothing is
    sent from here."""
    workdir = Path(workdir)
    entries, left_out = scan(workdir)
    entries = [e for e in entries if f"/{e.rel}" not in leave]
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
